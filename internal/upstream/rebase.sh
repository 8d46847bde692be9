#!/usr/bin/env bash
# rebase.sh: build idem's copies of Badger and ristretto from an upstream
# release plus the patch series, check them, record new hunks.
# See internal/upstream/README.md.
#
#   rebase.sh check [MODULE]            rebuild from the pristine release + the series in a
#                                       temporary directory and diff against the copy: any
#                                       difference (an unrecorded hunk) fails
#   rebase.sh diff MODULE               the difference check reports, as a unified diff
#   rebase.sh rebase MODULE [VERSION]   rebuild the copy in place from VERSION (default: the
#                                       one in MODULE/carry.conf), re-applying the series;
#                                       lists what did not apply (*.rej files beside the files)
#   rebase.sh record MODULE NAME FILE...
#                                       write the copy's current difference in FILEs (paths
#                                       relative to the copy, e.g. z/file.go) as a new patch
#                                       at the end of MODULE's series, NNNN-NAME.patch
#   rebase.sh refresh MODULE PATCH [FILE...]
#                                       rewrite PATCH's diff from the copy (after fixing its
#                                       rejects by hand), keeping its header; FILEs are added
#                                       to the files it touches
#
# MODULE is badger or ristretto. Needs go, git (diff --no-index) and GNU patch.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
modules=(badger ristretto)

die() { echo "rebase.sh: $*" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# The conversion program (import paths, proto rename, test build tag).
carry_bin=""
carry() {
  if [ -z "$carry_bin" ]; then
    carry_bin="$work/carry"
    (cd "$root" && GOFLAGS=-buildvcs=false go build -o "$carry_bin" ./internal/upstream/carry)
  fi
  "$carry_bin" "$@"
}

# load MODULE: reads MODULE/carry.conf into module, version, dest, skip_dirs,
# skip_files, test_dirs, own_files.
load() {
  local m=$1
  [ -f "$here/$m/carry.conf" ] || die "unknown module $m (want one of: ${modules[*]})"
  module="" version="" dest="" skip_dirs="" skip_files="" test_dirs="" own_files=""
  # shellcheck source=/dev/null
  source "$here/$m/carry.conf"
  [ -n "$module" ] && [ -n "$version" ] && [ -n "$dest" ] || die "$m/carry.conf lacks module, version or dest"
}

# pristine MODULE@VERSION: prints the release's directory in the module cache.
pristine() {
  local dir
  dir=$(cd "$work" && GOFLAGS= GOWORK=off go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || die "go mod download $1 gave no directory"
  echo "$dir"
}

# series MODULE: the patch files, in order.
series() { find "$here/$1" -maxdepth 1 -name '[0-9][0-9][0-9][0-9]-*.patch' | sort; }

# stage SRC OUT: copy what idem carries of the release at SRC into OUT.
stage() {
  local src=$1 out=$2 rel d keep
  mkdir -p "$out"
  cp "$src/LICENSE" "$out/LICENSE"
  while IFS= read -r rel; do
    rel=${rel#./}
    keep=1
    for d in $skip_dirs; do case "$rel" in "$d"/*) keep=0 ;; esac; done
    for d in $skip_files; do [ "$rel" = "$d" ] && keep=0; done
    if [ $keep = 1 ] && [[ $rel == *_test.go ]]; then
      keep=0
      d=$(dirname "$rel")
      for t in $test_dirs; do [ "$d" = "$t" ] && keep=1; done
    fi
    [ $keep = 1 ] || continue
    mkdir -p "$out/$(dirname "$rel")"
    cp "$src/$rel" "$out/$rel"
  done < <(cd "$src" && find . -type f \( -name '*.go' -o -name '*.s' \) | sort)
  chmod -R u+w "$out"
}

# apply OUT PATCH...: apply patches in order to the upstream-form tree OUT.
# Prints each result; returns 1 if any hunk was rejected (FILE.rej beside it).
apply() {
  local out=$1 p failed=0
  shift
  for p in "$@"; do
    if patch -d "$out" -p1 --batch --forward --no-backup-if-mismatch -i "$p" >"$work/patch.log" 2>&1; then
      if grep -q 'offset\|fuzz' "$work/patch.log"; then
        echo "   applied with offset/fuzz: $(basename "$p")"
        sed 's/^/     /' "$work/patch.log" | grep 'offset\|fuzz'
      else
        echo "   applied: $(basename "$p")"
      fi
    else
      failed=1
      echo "   FAILED:  $(basename "$p")"
      sed 's/^/     /' "$work/patch.log"
    fi
  done
  return $failed
}

# build MODULE OUT [SKIP]: the copy as the series makes it, in idem's form,
# in OUT; the upstream form is kept in OUT.upstream. SKIP names a patch to
# leave out. Returns 1 if a patch did not apply.
build() {
  local m=$1 out=$2 skip=${3:-} src p ok=0
  local ps=()
  src=$(pristine "$module@$version")
  stage "$src" "$out.upstream"
  while IFS= read -r p; do [ "$(basename "$p")" = "$skip" ] || ps+=("$p"); done < <(series "$m")
  echo "== $m: $module@$version + ${#ps[@]} patches"
  apply "$out.upstream" "${ps[@]}" || ok=1
  cp -r "$out.upstream" "$out"
  find "$out" -name '*.rej' -delete
  carry -to idem "$out"
  return $ok
}

# compare BUILT M: diff the built copy against the one in the tree.
compare() {
  local built=$1 m=$2 ex=()
  for f in $own_files; do ex+=(--exclude="$f"); done
  diff -ruN "${ex[@]}" "$built" "$root/$dest" | sed -e "s#$built/#series/#g" -e "s#$root/##g" || true
}

cmd_check() {
  local m fails=0 d
  local ms=("$@")
  [ ${#ms[@]} -gt 0 ] || ms=("${modules[@]}")
  for m in "${ms[@]}"; do
    load "$m"
    if ! build "$m" "$work/$m"; then
      echo "FAIL: the series does not apply to $module@$version"
      fails=1
      continue
    fi
    d=$(compare "$work/$m" "$m")
    if [ -n "$d" ]; then
      fails=1
      echo "FAIL: $dest differs from $module@$version + the series (an unrecorded hunk):"
      echo "$d" | sed -n 's#^+++ '"$dest"'/\([^[:space:]]*\).*#  '"$dest"'/\1#p'
      echo "  See the whole difference with: internal/upstream/rebase.sh diff $m"
      echo "  Record it with: internal/upstream/rebase.sh record $m NAME FILE... (README.md)"
    else
      echo "ok: $dest is $module@$version + the series"
    fi
  done
  return $fails
}

cmd_diff() {
  [ $# = 1 ] || die "usage: rebase.sh diff MODULE"
  load "$1"
  build "$1" "$work/$1" || true
  compare "$work/$1" "$1"
}

cmd_rebase() {
  [ $# -ge 1 ] && [ $# -le 2 ] || die "usage: rebase.sh rebase MODULE [VERSION]"
  local m=$1 rc=0 f rel
  load "$m"
  if [ $# = 2 ] && [ "$2" != "$version" ]; then
    sed -i "s/^version=.*/version=$2/" "$here/$m/carry.conf"
    version=$2
  fi
  build "$m" "$work/$m" || rc=1
  # Replace every carried file; keep idem's own (own_files).
  (cd "$root/$dest" && find . -type f | while IFS= read -r f; do
    f=${f#./}
    for o in $own_files; do [ "$f" = "$o" ] && continue 2; done
    rm -f "$f"
  done)
  find "$root/$dest" -type d -empty -delete
  (cd "$work/$m" && find . -type f) | while IFS= read -r f; do
    mkdir -p "$root/$dest/$(dirname "$f")"
    cp "$work/$m/$f" "$root/$dest/$f"
  done
  # Rejects, in upstream form, beside the files they belong to.
  while IFS= read -r rel; do
    cp "$work/$m.upstream/$rel" "$root/$dest/$rel"
  done < <(cd "$work/$m.upstream" && find . -name '*.rej' | sed 's#^\./##')
  echo
  if [ $rc = 0 ]; then
    echo "$dest is now $module@$version + the series. Run the carried tests:"
    echo "  go test -short -tags upstream -count=1 ./$dest/..."
  else
    echo "Some hunks did not apply; their rejects are beside the files:"
    (cd "$root/$dest" && find . -name '*.rej' | sed 's#^\./#  '"$dest"'/#')
    echo "Fix each file by hand, delete its .rej, then rewrite the patch from the copy:"
    echo "  internal/upstream/rebase.sh refresh $m NNNN-name.patch"
  fi
  return $rc
}

# diff_files BASE_UPSTREAM FILE...: a git-style diff, upstream form, from
# BASE_UPSTREAM (a built tree) to the copy's current FILEs.
diff_files() {
  local base=$1 f
  shift
  rm -rf "$work/d" && mkdir -p "$work/d/a" "$work/d/b"
  for f in "$@"; do
    f=${f#./}
    f=${f#"$dest"/}
    if [ -f "$base/$f" ]; then mkdir -p "$work/d/a/$(dirname "$f")" && cp "$base/$f" "$work/d/a/$f"; fi
    if [ -f "$root/$dest/$f" ]; then mkdir -p "$work/d/b/$(dirname "$f")" && cp "$root/$dest/$f" "$work/d/b/$f"; fi
    [ -f "$base/$f" ] || [ -f "$root/$dest/$f" ] || die "$f: in neither the series' build nor $dest"
  done
  carry -to upstream "$work/d/b"
  (cd "$work/d" && git -c core.quotepath=off diff --no-index --no-prefix --no-color --no-ext-diff a b || true) |
    sed -e '/^index /d' -e 's#^diff --git b/\(.*\) b/#diff --git a/\1 b/#' -e 's#^diff --git a/\(.*\) a/\(.*\)$#diff --git a/\1 b/\2#'
}

cmd_record() {
  [ $# -ge 3 ] || die "usage: rebase.sh record MODULE NAME FILE..."
  local m=$1 name=$2 last n out d
  shift 2
  load "$m"
  [[ $name =~ ^[a-z0-9][a-z0-9-]*$ ]] || die "NAME is lower-case words joined by dashes, e.g. fallocate-before-mmap"
  build "$m" "$work/$m" >/dev/null || die "the series does not apply as it is: run rebase.sh check $m"
  d=$(diff_files "$work/$m.upstream" "$@")
  [ -n "$d" ] || die "no difference in $* between the series and $dest"
  last=$(series "$m" | tail -n1)
  n=1
  [ -z "$last" ] || n=$((10#$(basename "$last" | cut -c1-4) + 1))
  out="$here/$m/$(printf '%04d' "$n")-$name.patch"
  {
    echo "Subject: [PATCH] ${name//-/ } (TODO: one line, what the change does)"
    echo
    echo "TODO: why, as the commit message upstream would state it: what goes"
    echo "wrong without the change, and how the change fixes it."
    echo
    echo "Upstream: $module $version"
    echo "Files: $(echo "$d" | sed -n 's#^diff --git a/\(.*\) b/.*#\1#p' | paste -sd' ')"
    echo "Test: TODO (the test that shows it; a new _test.go file written against"
    echo "  upstream's API can be part of this patch)"
    echo "Proposal: TODO (yes; or: not for upstream, and why)"
    echo "---"
    echo "$d"
  } >"$out"
  echo "wrote ${out#"$root"/}: fill in its header (the TODOs), then run"
  echo "  internal/upstream/rebase.sh check $m"
}

cmd_refresh() {
  [ $# -ge 2 ] || die "usage: rebase.sh refresh MODULE PATCH [FILE...]"
  local m=$1 p files d
  load "$m"
  p="$here/$m/$(basename "$2")"
  shift 2
  [ -f "$p" ] || die "no patch $p"
  build "$m" "$work/$m" "$(basename "$p")" >/dev/null || die "the other patches of the series do not apply: fix them first"
  mapfile -t files < <(sed -n 's#^diff --git a/\(.*\) b/.*#\1#p' "$p")
  files+=("$@")
  [ ${#files[@]} -gt 0 ] || die "$p has no 'diff --git' lines"
  d=$(diff_files "$work/$m.upstream" "${files[@]}")
  [ -n "$d" ] || die "the copy has none of $(basename "$p")'s changes"
  { sed -n '1,/^---$/p' "$p"; echo "$d"; } >"$work/refreshed"
  cp "$work/refreshed" "$p"
  echo "rewrote ${p#"$root"/}; now: internal/upstream/rebase.sh check $m"
}

[ $# -ge 1 ] || die "usage: rebase.sh check|diff|rebase|record|refresh ... (see the top of this file)"
command -v patch >/dev/null || die "needs GNU patch (apt-get install patch)"
cmd=$1
shift
case "$cmd" in
  check) cmd_check "$@" ;;
  diff) cmd_diff "$@" ;;
  rebase) cmd_rebase "$@" ;;
  record) cmd_record "$@" ;;
  refresh) cmd_refresh "$@" ;;
  *) die "unknown command $cmd" ;;
esac
