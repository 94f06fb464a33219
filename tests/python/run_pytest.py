"""Runs one test file of tests/python with pytest for CTest: exit 77 (CTest's skip) with the
reason when pytest is missing or every test of the file skipped; pytest's status otherwise."""

import sys

try:
    import pytest
except ImportError:
    print("skipped: pytest is not installed (Debian: python3-pytest)")
    sys.exit(77)


class Outcomes:
    def __init__(self):
        self.ran, self.skipped = 0, []

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and not report.skipped:
            self.ran += 1
        elif report.skipped:
            self.skipped.append(str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr))

    def pytest_collectreport(self, report):
        if report.skipped:
            self.skipped.append(str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr))


outcomes = Outcomes()
status = pytest.main(["-v", "-rs", "-p", "no:cacheprovider"] + sys.argv[1:], plugins=[outcomes])
if status in (0, 5) and outcomes.ran == 0 and outcomes.skipped:
    print("skipped: " + "; ".join(sorted(set(outcomes.skipped))))
    sys.exit(77)
sys.exit(status)
