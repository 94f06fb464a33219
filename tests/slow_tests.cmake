# Run by CTest after the doctest cases are discovered (TEST_INCLUDE_FILES): labels `slow` the long
# cases that repeat what a faster case already covers, so that `./test.sh` stays under 10 minutes
# on 2 cores; `./test.sh --all` runs them too. The tests outside gossamer-tests (examples, Python,
# packaging, the GPU bundle) are labelled where they are added.
#
# - the elastic process matrix: every algorithm's kill -9 of 1 and of 2 of 6 peers, but for
#   allreduce-sgd's 2 of 6, and the second of each kind of restart or join (one stays in);
# - chaos's long survival runs (the chaos cases that check refusals stay);
# - the gossip algorithms' convergence with every codec (each codec's own cases stay);
# - the real peers' twins of cases the simulator or the in-process transport checks exactly
#   (comm wait, 16 peers joining), and the second of two seed-loss cases and of two wrong-secret
#   ones.
set(gossamer_slow_patterns
    "^elastic processes: [a-z-]+( --[a-z.]+ [0-9]+)?: kill -9 of [12] of 6"
    "^elastic processes: (allreduce-sgd|easgd): a peer restarted without --resume joins late$"
    "^elastic processes: dpsgd: a peer joining mid-run catches up$"
    "^elastic processes: gosgd: a killed peer restarts from its checkpoint and rejoins$"
    "^bench chaos: .* survive "
    "compressed: reaches the convex optimum's neighbourhood with every codec$"
    "^comm wait: blocking and asynchronous exchanges against their closed form, real peers$"
    "^membership: 16 peers joining by a chain of seeds all see 16 members \\(tcp\\)$"
    "^join processes: a peer that got in and lost its seed before training waits as usual$"
    "^join processes: a wrong-secret peer \\(TLS by default\\) exits within 15 s")
set(gossamer_kept "elastic processes: allreduce-sgd: kill -9 of 2 of 6 peers (the first one too)")
foreach(test IN LISTS gossamer-tests_TESTS)
  if(test STREQUAL gossamer_kept)
    continue()
  endif()
  foreach(pattern IN LISTS gossamer_slow_patterns)
    if(test MATCHES "${pattern}")
      set_tests_properties("${test}" PROPERTIES LABELS slow)
      break()
    endif()
  endforeach()
endforeach()
