#!/usr/bin/env bash
# The same inputs give the same package, byte for byte: build-deb runs twice on the files
# //deploy/debian:deb was built from, with a different umask, time zone, locale and clock, and
# both packages must equal the one Bazel built.
#   reproducible_test.sh RINGD.DEB RINGD RINGD.8 BUILD_STAMP
set -euo pipefail
deb=$1 binary=$2 manpage=$3 stamp=$4
out=${TEST_TMPDIR:-$(mktemp -d)}
(umask 077; TZ=Pacific/Kiritimati LC_ALL=C.UTF-8 deploy/debian/build-deb "$out/a.deb" "$binary" "$manpage" "$stamp")
sleep 1
(umask 002; TZ=UTC LC_ALL=C deploy/debian/build-deb "$out/b.deb" "$binary" "$manpage" "$stamp")
status=0
for built in "$out/a.deb" "$out/b.deb"; do
  if ! cmp -s "$deb" "$built"; then
    echo "reproducible_test: $built differs from $deb"
    diff <(dpkg-deb -c "$deb") <(dpkg-deb -c "$built") || true
    diff <(dpkg-deb -I "$deb") <(dpkg-deb -I "$built") || true
    status=1
  fi
done
[[ $status -eq 0 ]] && echo "reproducible_test: 3 builds, one sha256: $(sha256sum < "$deb" | cut -c1-16)"
exit $status
