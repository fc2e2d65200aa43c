#!/usr/bin/env bash
# A tier the io::Loop tests need but cannot use is a skip that says why, and a failure when
# RINGD_REQUIRED_TIERS names it (io/loop_test_fixture.h): loop_test runs with io_uring blocked by
# seccomp (ENOSYS, as Docker's default profile does), once without and once with the setting.
#   required_tiers_test.sh <seccomp_exec> <loop_test>
set -uo pipefail
wrap=$1
tests=$2
filter='Backends/LoopTest.ReceiveDeliversBytesThenEndsOnceAtEndOfStream/*'
# The children are not this test: they must not write its result files.
run() {
  env -u RINGD_REQUIRED_TIERS -u XML_OUTPUT_FILE -u TEST_PREMATURE_EXIT_FILE -u TEST_SHARD_STATUS_FILE \
    -u TEST_TOTAL_SHARDS -u TEST_SHARD_INDEX "$@" "$wrap" "$tests" --gtest_filter="$filter" 2>&1
}
fail() {
  echo "required_tiers_test: $1"
  echo "$2"
  exit 1
}

out=$(run)
rc=$?
[[ $rc -eq 0 ]] || fail "without RINGD_REQUIRED_TIERS, loop_test exited $rc" "$out"
grep -q "uring is not usable here: " <<<"$out" || fail "no skip that says why" "$out"

out=$(run RINGD_REQUIRED_TIERS=bypass,uring,epoll)
rc=$?
[[ $rc -ne 0 ]] || fail "required tiers that cannot run passed" "$out"
grep -q "the uring tier is required here (RINGD_REQUIRED_TIERS) but uring cannot run: " <<<"$out" ||
  fail "no failure that says why" "$out"
grep -q "the bypass tier is required here" <<<"$out" || fail "bypass did not fail" "$out"

out=$(run RINGD_REQUIRED_TIERS=epoll)
rc=$?
[[ $rc -eq 0 ]] || fail "with only epoll required, loop_test exited $rc" "$out"
echo "required_tiers_test: ok"
