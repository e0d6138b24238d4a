#!/usr/bin/env bash
# Fetches the evaluation corpus: Part I of The Jargon File 4.4.7 (Debian
# package jargon-text), as plain UTF-8 prose, into
# ${TQ_CACHE:-$HOME/.cache/tqkit}/text/jargon-part1.txt, verified against
# data/text.sha256.
#
# Extraction: from the line starting "Chapter 1." (the chapter itself, not the
# table of contents) up to, excluding, the line containing "Part II. The
# Jargon Lexicon"; the file separates those words with U+00A0 (no-break
# space), so either space matches. Lines containing box-drawing characters
# (tables) are dropped, up to 3 leading spaces are stripped per line,
# trailing blank lines are dropped and the text ends with one newline.
#
# Idempotent; prints only errors and, on success, one summary line.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SUMS=$HERE/text.sha256
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
DIR=$CACHE/text
NAME=jargon-part1.txt
OUT=$DIR/$NAME

die() { echo "fetch_text.sh: error: $*" >&2; exit 1; }
for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch_text.sh: error: unknown option '$a'" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || die "python3 is required"
[ -f "$SUMS" ] || die "missing $SUMS"
want=$(awk -v f="$NAME" '$2 == f || $2 == "*" f { print $1 }' "$SUMS")
[ -n "$want" ] || die "no sha256 for $NAME in $SUMS"

if [ -f "$OUT" ] && [ "$(sha256sum "$OUT" | cut -d' ' -f1)" = "$want" ]; then
  echo "fetch_text.sh: corpus present and verified: $OUT"
  exit 0
fi

mkdir -p "$DIR"
WORK=$(mktemp -d "$DIR/fetch.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
(
  cd "$WORK"
  if ! apt-get download jargon-text >apt.log 2>&1; then
    # The package lists may be missing or stale: refresh them once and retry.
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    $SUDO apt-get update -qq >>apt.log 2>&1 || true
    apt-get download jargon-text >>apt.log 2>&1 || { cat apt.log >&2; exit 1; }
  fi
) || die "apt-get download jargon-text failed"
deb=$(ls "$WORK"/jargon-text_*.deb 2>/dev/null | head -n 1)
[ -n "$deb" ] || die "apt-get download produced no jargon-text .deb"
dpkg -x "$deb" "$WORK/x" || die "dpkg -x $deb failed"
src=$WORK/x/usr/share/doc/jargon-text/jargon.txt.gz
[ -f "$src" ] || die "$deb has no usr/share/doc/jargon-text/jargon.txt.gz"

python3 - "$src" "$WORK/$NAME" <<'PY' || die "cannot extract Part I from $src"
import gzip, re, sys
src, dest = sys.argv[1:3]
lines = gzip.open(src, "rt", encoding="utf-8").read().split("\n")
sp = "[ \u00a0]"
start = next((i for i, l in enumerate(lines) if re.match(f"Chapter{sp}1\\.", l)), None)
end = next((i for i, l in enumerate(lines)
            if re.search(f"Part{sp}II\\.{sp}The{sp}Jargon{sp}Lexicon", l) and start is not None and i > start), None)
if start is None or end is None:
    sys.exit(f"{src}: cannot find 'Chapter 1.' or 'Part II. The Jargon Lexicon'")
box = set("│├┼─┌┐└┘┬┴┤")
out = [re.sub(r"^ {1,3}", "", l) for l in lines[start:end] if not any(c in box for c in l)]
text = "\n".join(out).rstrip("\n") + "\n"
with open(dest, "w", encoding="utf-8") as f:
    f.write(text)
PY

got=$(sha256sum "$WORK/$NAME" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  rm -f "$OUT"
  die "$NAME: sha256 mismatch (got $got, expected $want); nothing was installed"
fi
mv -f "$WORK/$NAME" "$OUT"
echo "fetch_text.sh: fetched and verified corpus: $OUT"
