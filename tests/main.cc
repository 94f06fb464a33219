// The test binary's main: doctest's, and a run that a --test-case filter gave no test case fails.
// CTest runs each TEST_CASE by its name (doctest_discover_tests); a name that CTest cannot carry
// whole (it cuts at ';') selects nothing, and doctest alone would report that as a success.
#define DOCTEST_CONFIG_IMPLEMENT
#include <cstring>
#include <iostream>

#include <doctest/doctest.h>

namespace {

// Counts the test cases a run selected (the run's end statistics).
struct SelectedCases : doctest::IReporter {
  static inline unsigned selected = 0;
  explicit SelectedCases(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats& stats) override {
    selected = stats.numTestCasesPassingFilters;
  }
  void test_case_start(const doctest::TestCaseData&) override {}
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {}
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("selected-cases", 1, SelectedCases);

int main(int argc, char** argv) {
  doctest::Context context(argc, argv);
  const int status = context.run();
  if (context.shouldExit()) return status;
  for (int i = 1; i < argc; ++i) {
    const bool byName =
        std::strncmp(argv[i], "--test-case=", 12) == 0 || std::strncmp(argv[i], "-tc=", 4) == 0;
    if (byName && SelectedCases::selected == 0) {
      std::cerr << "no test case matches " << argv[i] << " (a name CTest cut short, at a ';'?)\n";
      return 1;
    }
  }
  return status;
}
