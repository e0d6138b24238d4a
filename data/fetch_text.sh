#!/usr/bin/env bash
# Fetches the evaluation corpora from The Jargon File 4.4.7 (Debian package
# jargon-text), as plain UTF-8 text, into ${TQ_CACHE:-$HOME/.cache/tqkit}/text/,
# verified against data/text.sha256:
#
#   jargon-part1.txt    Part I (75 KB, ~18K tokens): the n_ctx 512 corpus.
#   jargon-lexicon.txt  Part II (the lexicon) and the appendices (1.5 MB,
#                       ~400K tokens): the long-context and passkey corpus,
#                       disjoint from Part I.
#
# Extraction: Part I runs from the line starting "Chapter 1." (the chapter
# itself, not the table of contents) up to, excluding, the line containing
# "Part II. The Jargon Lexicon" (the one after Chapter 1); the lexicon file
# runs from that line to the end. The file separates those words with U+00A0
# (no-break space), so either space matches. Lines containing box-drawing
# characters (tables) are dropped, up to 3 leading spaces are stripped per
# line, trailing blank lines are dropped and each text ends with one newline.
#
# Idempotent; prints only errors and, on success, one summary line.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
SUMS=$HERE/text.sha256
CACHE=${TQ_CACHE:-$HOME/.cache/tqkit}
DIR=$CACHE/text
NAMES=(jargon-part1.txt jargon-lexicon.txt)

die() { echo "fetch_text.sh: error: $*" >&2; exit 1; }
for a in "$@"; do
  case "$a" in
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "fetch_text.sh: error: unknown option '$a'" >&2; exit 2 ;;
  esac
done
command -v python3 >/dev/null || die "python3 is required"
[ -f "$SUMS" ] || die "missing $SUMS"
want_of() { awk -v f="$1" '$2 == f || $2 == "*" f { print $1 }' "$SUMS"; }
all_good=1
for n in "${NAMES[@]}"; do
  w=$(want_of "$n")
  [ -n "$w" ] || die "no sha256 for $n in $SUMS"
  if ! [ -f "$DIR/$n" ] || [ "$(sha256sum "$DIR/$n" | cut -d' ' -f1)" != "$w" ]; then all_good=0; fi
done
if [ "$all_good" -eq 1 ]; then
  echo "fetch_text.sh: corpora present and verified: ${NAMES[*]/#/$DIR/}"
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

python3 - "$src" "$WORK/${NAMES[0]}" "$WORK/${NAMES[1]}" <<'PY' || die "cannot extract the corpora from $src"
import gzip, re, sys
src, dest, dest_lexicon = sys.argv[1:4]
lines = gzip.open(src, "rt", encoding="utf-8").read().split("\n")
sp = "[ \u00a0]"
start = next((i for i, l in enumerate(lines) if re.match(f"Chapter{sp}1\\.", l)), None)
end = next((i for i, l in enumerate(lines)
            if re.search(f"Part{sp}II\\.{sp}The{sp}Jargon{sp}Lexicon", l) and start is not None and i > start), None)
if start is None or end is None:
    sys.exit(f"{src}: cannot find 'Chapter 1.' or 'Part II. The Jargon Lexicon'")
box = set("│├┼─┌┐└┘┬┴┤")
def write(part, path):
    out = [re.sub(r"^ {1,3}", "", l) for l in part if not any(c in box for c in l)]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out).rstrip("\n") + "\n")
write(lines[start:end], dest)
write(lines[end:], dest_lexicon)
PY

for n in "${NAMES[@]}"; do
  got=$(sha256sum "$WORK/$n" | cut -d' ' -f1)
  w=$(want_of "$n")
  if [ "$got" != "$w" ]; then
    rm -f "$DIR/$n"
    die "$n: sha256 mismatch (got $got, expected $w); nothing was installed"
  fi
done
for n in "${NAMES[@]}"; do mv -f "$WORK/$n" "$DIR/$n"; done
echo "fetch_text.sh: fetched and verified corpora: ${NAMES[*]/#/$DIR/}"
