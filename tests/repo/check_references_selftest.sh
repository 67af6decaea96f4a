#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# check_references.sh must fail on a tree with each kind of reference, naming each line, and
# pass on a clean one. Usage: check_references_selftest.sh <scratch dir>
set -euo pipefail
checker="$(cd "$(dirname "$0")" && pwd)/check_references.sh"
work=$1
rm -rf "$work"
mkdir -p "$work/docs" "$work/src" "$work/bench"
printf '# Title\nSee docs/GUIDE.md and the seed corpus.\n' >"$work/README.md"
printf 'Guide.\n' >"$work/docs/GUIDE.md"
printf '// device memory runs are merged\n' >"$work/src/a.cpp"
"$checker" "$work" >/dev/null || { echo "self-test: a clean tree failed"; exit 1; }

printf 'See ../shared/NOTES.md and /work/main/x.\n' >>"$work/docs/GUIDE.md"
printf '// fixed in issue 12; issues 4 and 5\n// device run 7, this session\n' >>"$work/src/a.cpp"
printf '// as the seed'"'"'s loop does; see DESIGN.md\n' >"$work/bench/b.cpp"
if out=$("$checker" "$work"); then
  echo "self-test: a tree with references passed:"
  echo "$out"
  exit 1
fi
for want in 'docs/GUIDE.md:2:' 'src/a.cpp:2:' 'src/a.cpp:3:' 'bench/b.cpp:1:' \
  'DESIGN.md is referred to' 'NOTES.md is referred to'; do
  if ! grep -qF -- "$want" <<<"$out"; then
    echo "self-test: '$want' not reported:"
    echo "$out"
    exit 1
  fi
done
echo "check_references self-test: ok"
