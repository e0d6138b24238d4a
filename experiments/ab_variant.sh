# Sourced by ab_kernels.sh and ab_torch_op.sh.
# ab_variant_tree ROOT OVERLAY DEST: DEST becomes the source tree of variant OVERLAY (experiments/ab/<NAME>/):
# OVERLAY itself where it is a whole tree (ab_overlay.sh --tree, marked by .ab_tree; ROOT's .deps copied beside
# it), else a copy of ROOT with OVERLAY's files over it; build outputs and experiments/ab left out.
ab_variant_tree() {
  local root=$1 overlay=$2 dest=$3
  rm -rf "$dest" && mkdir -p "$dest" || return 1
  if [ -f "$overlay/.ab_tree" ]; then
    cp -r "$overlay/." "$dest/" && { [ ! -d "$root/.deps" ] || cp -r "$root/.deps" "$dest/"; } || return 1
  else
    cp -r "$root/." "$dest/" && cp -r "$overlay/." "$dest/" || return 1
  fi
  rm -rf "$dest/build-kernels" "$dest/experiments/ab" "$dest/python/build" "$dest"/python/tqkit_torch/_C*.so
}
