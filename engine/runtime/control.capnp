# The peer runtime's own messages between peers (engine/runtime/control.h). Each travels as the
# `control` bytes of an envelope of route `runtime` (net/messages.capnp); a payload, when there is
# one, travels beside it as any envelope's does. Read with the limits of net/wire/flat.h.
# Evolution: only append fields and union members with the next ordinal.

@0xa3867719d3c7761d;

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("gossamer::engine::runtime::schema");

struct Control {
  union {
    statusRequest @0 :Void;  # "are you training, at which step, and did you start with me?"
    status @1 :Status;       # the answer
    finished @2 :Mark;       # the sender's training loop is over
    released @3 :Mark;       # the sender has what it needs from the others: they may leave
    pullModel @4 :Void;      # "send me your params at your next step boundary"
    model @5 :Void;          # the answer: the params as the payload, their step in the envelope
    statusRequestOf @6 :StatusRequest;  # statusRequest naming the asker's life (sent instead)
    # A verified catch-up in chunks (catch_up.h). Their fields travel as the envelope's integers:
    stateRequest @7 :Void;   # "hold a copy of your params at your next step boundary for me"
    stateHeader @8 :Void;    # the answer: {copy id, floats}; its step in the envelope
    chunkRequest @9 :Void;   # {copy id, chunk, chunk floats, attempt, send bytes, send digest}
    chunk @10 :Void;         # {copy id, chunk, attempt, held, [4 digest words]}; bytes as payload
    speed @11 :Speed;        # how fast the sender trains (uneven peers), sent every second or so
  }
}

# A peer's own measurement over its last window of steps (engine/runtime/speeds.h).
struct Speed {
  stepSeconds @0 :Float64;       # compute per step: gradients and optimizer, emulated included
  samplesPerSecond @1 :Float64;  # samples trained on per second of its loop, waits included
  step @2 :UInt64;               # its step at the end of the window
}

struct StatusRequest {
  # The asker's incarnation when the membership admitted this life of it: a restarted process
  # starts above any incarnation of its earlier lives, so a peer that started training with an
  # earlier life tells the restart from an initial member that was slow to start.
  life @0 :UInt64;
}

struct Status {
  training @0 :Bool;
  step @1 :UInt64;
  totalSteps @2 :UInt64;
  expected @3 :Bool;  # the asker (that life of it) is a member the answerer started training with
  members @4 :UInt32; # how many members the answerer's view holds now
  done @5 :Bool;      # the answerer trained all its steps: the run is ending, nothing to join
  runSteps @6 :UInt64; # the run's steps per peer as planned (totalSteps before an algorithm
                       # moved the end: time-boxed rounds); 0 from an older peer: totalSteps
}

# `finished` and `released` are each sent once on each of the two links (control and data),
# behind everything the sender's compute thread sent on it: when both marks are in, everything
# the sender sent before has arrived (a mark on one link could overtake data on the other).
struct Mark {
  channel @0 :UInt8;
  waiting @1 :Bool;  # sent again by a member that still misses the receiver's marks: answer it
}
