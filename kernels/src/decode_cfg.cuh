// Compile-time configuration of the quantized paged decode (internal), shared by the planner and
// launchers (decode.cu) and the kernel (decode_kernel.cuh). The kernel's instantiations are
// spread over one translation unit per format (decode_<format>.cu, all head dims each, generated
// by the build from the TQ_GPU_CODECS rows: kernels/CMakeLists.txt), so a build compiles them in
// parallel; decode.cu reaches them only through decode_kernel_occupancy
// and decode_kernel_launch, declared here.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda.h>  // CUtensorMap (the type only: maps are encoded through cudaGetDriverEntryPointByVersion)
#include <cuda_runtime.h>

#include "decode_common.cuh"
#include "decode_key_codecs.cuh"
#include "formats.cuh"

namespace tq::cuda {

// The kernel's tables parameter (by value; see TablesFor).
struct DecodeTables {
  float centroids[16];
  float rot_scale;
  float lut_scale;  // α
  int nc;
  uint32_t s1[4], s2[4];  // turbo: sign tables (bit i set = −1), q′ = s2·H·(s1·q)/√128
  // > 0: DecodePlan::balance_slots, the tokens dealt out by dev::work_item_balanced (here, not in
  // DecodeArgs: a larger DecodeArgs changed our FP16 kernel's SASS, which never balances)
  int balance;
};
// turbo4-qjl kernels' tables (a separate type: a larger DecodeTables parameter changed the
// other kernels' register allocation and schedules)
struct DecodeTablesQjl : DecodeTables {
  uint32_t qs1[4], qs2[4];  // the QJL rotation's sign tables, R = qs2·H·qs1/√128
  float qjl_scale;          // κ (TurboCodec::qjl_scale): ŷ = c + κ·rnorm·R⁻¹(±1)
};

// The tensor-map kernels' tables (decode_kernel's TM variant, tm_copies): the map of the cache
// whose boxes are a CTA's 16-token halves (a separate type, as for DecodeTablesQjl, so the other
// kernels' parameters stay as they were).
struct DecodeTablesTm : DecodeTables {
  CUtensorMap map;  // 2-D, 8-byte elements: x = a token row's bytes / 8, y = the cache's token rows
};

// How a launch covers the G query heads (columns) of a kv head: the kernel computes at most 8
// columns per warp.
enum class QuerySlicing {
  whole,  // G ≤ 8: all columns in one launch
  one,    // one slice of ≤ 8 columns of G > 8 (a launch per slice: for_each_query_slice)
  both,   // both slices of 8 < G ≤ 16 in one launch, a second set of warps for columns 8 … (query_slices)
};

// Which instantiation of the quantized decode kernel a launch takes (pick_kernel, which maps it to
// a KernelTraits): the plane layout or not, query columns of the launch (G ≤ 8 per slice; G when
// slicing = both), heads per CTA, warps per head, the slicing, and the tensor-map copies.
struct DecodeKernelSel {
  bool planes = false;
  int group = 0, heads_per_cta = 0, warps_per_head = 0;
  QuerySlicing slicing = QuerySlicing::whole;
  bool tensor_map = false;  // tm_copies: one tensor-map box per 16-token half
  bool causal = false;      // multi-query (q_len > 1): the causal kernels (KernelTraits::kCausal)
  int column_tiles = 1;     // causal: 8-column N-tiles per warp (KernelTraits::kNTiles)
  bool cta_merge = false;   // the CTA merges its warps' parts (KernelTraits::kCtaMerge; DecodePlan::part_warps 1)
};

// The causal kernels' tables: the format's tables plus MultiQuery (a separate type, as for
// DecodeTablesTm: the single-query kernels' parameters stay as they were).
template <class T>
struct CausalTables : T {
  MultiQuery mq;
};

// Per format C (a FormatCfg), defined in decode_kernel.cuh and explicitly instantiated in
// the generated decode_<format>.cu: the selected kernel's resident CTAs per SM for `threads` threads and
// `smem_bytes` of dynamic shared memory (after setting its dynamic shared-memory limit), and
// its launch. t: every kernel takes its TablesFor<C> part. pdl: a programmatic dependent launch (the
// previous kernel on the stream is one of the decode's own: launch_programmatic).
template <class C>
int decode_kernel_occupancy(const DecodeKernelSel& sel, int threads, int smem_bytes);
template <class C>
void decode_kernel_launch(const DecodeKernelSel& sel, const DecodeArgs& a, const DecodeTablesQjl& t,
                          const MultiQuery& mq, const uint8_t* cache, const CUtensorMap* map, dim3 grid, int threads,
                          int smem_bytes, cudaStream_t stream, bool pdl);

namespace {

template <ValueKind Kind, int Bits>
struct ValueCodec;  // decode_value_codecs.cuh

constexpr int kSub = 32;       // tokens per warp sub-tile
constexpr int kMaxStages = 4;

// Wide-LUT kernels (QCfg::kWide): the LUT sits at shared address kLutAddr (64 KB
// aligned, so an entry address is one PRMT of the code byte with kLutAddr | 4·lane),
// ring pieces below it from the dynamic base and from kRingHi up. Where that ring does not
// fit (pieces of 16 tokens × 15–16 heads of 134-byte slots: one piece below 64 KB), the LUT
// moves to kLutAddr2 with the q buffers and three pieces below it (RingLayout); the kernel
// finds the LUT 64 KB below DecodeArgs::ring_hi. The dynamic base (after the 1 KB system
// reserve and this kernel's static shared memory) is assumed in [kBaseMin, kBaseMax]; the
// kernel checks it.
constexpr uint32_t kLutAddr = 0x10000u, kRingHi = 0x20000u, kBaseMin = 0x400u, kBaseMax = 0x800u;
constexpr uint32_t kLutBytesWide = 0x10000u, kLutAddr2 = 0x20000u;

template <class C>
struct QCfg {
  // turbo2/3/4 (turboquant_plus blocks, keys and values): scores and values in the rotated
  // domain of each 128-value block (d = 64: one zero-padded block; d = 256: two, each with
  // its own key norm and value norm), so D — the MMA dims — is 128 · blocks while the
  // query and output rows have C::kD values. Block b holds MMA dims 128b … 128b + 127
  // (k-steps 8b …, value m-tiles 8b …).
  // turbo4-qjl (kQjl, a turbo kind here): {raw norm, residual norm, 3-bit index stream,
  // 1-bit QJL signs} per block; the score adds norm·κ·rnorm·(R q′)·(±1) — a second MMA
  // chain over the signs with the query rotated once more — and the values a second
  // accumulator over the signs, rotated back by R⁻¹ at the write-out (see the kernel).
  using Keys = KeyCodec<C::kKey, C::kKeyBits>;          // decode_key_codecs.cuh
  using Values = ValueCodec<C::kValue, C::kValueBits>;  // decode_value_codecs.cuh
  static constexpr bool kQjl = Keys::kSignTerm;
  static constexpr bool kTurbo = Keys::kBlocks;
  static constexpr int kTB = kTurbo ? C::kTurboBlocks : 1;  // turbo blocks per head (1 otherwise)
  static constexpr int D = kTurbo ? 128 * kTB : C::kD;
  static constexpr int kSlot = layout::vllm_slot_bytes(C::kKeyBytes, C::kValueBytes);
  static constexpr int kKSteps = D / 16;
  static constexpr bool kMse = Keys::kNormSums;  // mse keys: {indices, norm}, the norm sums
  static constexpr bool kLut = Keys::kLut;        // keys through the centroid-pair LUT
  static constexpr int kLutCopies = 32;          // one per lane: conflict-free
  // d ≤ 128 ("wide LUT"): one 16-warp CTA per SM shares a LUT of 256-byte rows in
  // dynamic shared memory, so an entry address is (code byte << 8) | 4·lane: one PRMT.
  // The key entries fill the first half of each row; mse keys keep their squares in the
  // second (kSqLut). 3-bit mse keys: row e holds pair code e & 63 (a pair at bits 0–5 of
  // a byte, the top two bits ignored), so each pair of a lane's 24 code bits is one PRMT
  // from the word shifted by 0, 6, 4 or 2 bits (wide_lut_addrs).
  // d = 256: 128-byte rows in static shared memory, two 8-warp CTAs… (registers:
  // one), address = LEA.
  static constexpr bool kWide = kLut && D <= 128 && !kQjl;  // qjl: two accumulators, 255 registers
  // turbo4-qjl's ±1 halves (sign_frag) from a shared LUT at d = 64, on the ALU otherwise (the
  // LUT form takes ~10 shared-memory loads per 4 dims and pays off only at d = 64)
  static constexpr bool kSignLut = kQjl && C::kD <= 64;
  static constexpr int kSignLutEntries = kSignLut ? 16 * 32 : 1;  // 16 rows × 32 lane copies (uint2)
  // mse keys: the second 128 bytes of each 256-byte LUT row (unused by the key entries) hold
  // the lane copies of {hi, lo} = the pair's x_a² + x_b² (x = the fp16 key entries) split into two
  // fp16, so one m16n8k16 with B = ones sums a row's squares exactly (the nc norm's Σc²)
  static constexpr bool kSqLut = kWide && kMse;
  static constexpr int kLutEntries = !kLut ? 0 : kSqLut ? 256 : 1 << Keys::kPairBits;
  static constexpr int kLutRow = kWide ? 256 : 128;
  static constexpr int kLutBytes = kLutEntries * kLutRow;
  static constexpr int kCtaWarps = kWide ? 16 : 8;
  static constexpr int kPairSteps = D / 32;
  static constexpr int kVChunk = D * C::kValueBits / 64;          // value-code bytes of D/8 dims (one lane row)
  // 4-bit values: lane row r reads the u16 words at bytes 2r + 16w (w < kVChunk/2) of each
  // token's codes, so the 8 rows of a lane quad read 4 consecutive words and the four
  // quads' tokens (8·slot apart) land in disjoint banks (rows of 8 contiguous bytes per
  // lane, as the 3-bit path reads them, would be 2-way bank conflicted). Word w of row r
  // holds dims 4r + 32w … +3 → m-tiles 2w, 2w+1 (see out_dim).
  // turbo: row r takes dims 4r + 32w … +3 as well (turbo4: a u16 of qs; turbo3: a byte
  // of qs and a sign nibble; turbo2: a byte of qs).
  static constexpr int kVRowBytes = C::kValueBits == 4 ? 2 : kQjl ? 0 : kTurbo ? 1 : kVChunk;
  // output dim of row r of m-tile i (row r + 8: the next dim)
  static __device__ __forceinline__ int out_dim(int r, int i) {
    return C::kValueBits == 4 || kTurbo ? 4 * r + 32 * (i >> 1) + 2 * (i & 1) : r * (D / 8) + 2 * i;
  }
};

// N-tiles per warp of the format's kernels for 9 … 16 columns per kv head (KernelTraits::kNTiles):
// 2 at head_dim ≤ 128 for the formats whose P' is fp16 alone at G > 4 (kHiOnlyP: every format but
// turbo4-qjl, whose sign term takes a second accumulator set), else 1 (d = 256: the 8-warp kernels
// already use 200–235 registers). turbo2/3/4 at d ≤ 128: 239–246 registers, no spills.
constexpr int kMqTileWarps = 8;  // warps per CTA of the two-tile kernels (KernelTraits::kCtaWarps)
template <class C>
constexpr int mq_column_tiles() {
  using Q = QCfg<C>;
  return !Q::kQjl && Q::kTB == 1 && Q::D <= 128 ? 2 : 1;
}

template <class C>
using TablesFor = std::conditional_t<QCfg<C>::kQjl, DecodeTablesQjl, DecodeTables>;

// Bytes from one token's row to the next in a ring piece (16 tokens × hpc heads' slots, vLLM
// layout). A key load reads 4 consecutive words of each of 8 tokens' rows; rows a multiple of
// 64 bytes apart start on at most 2 bank groups (turbo2/3/4 slots at 16 heads: 4-way conflicts
// that no token order or row-independent lane → word map avoids). There the
// wide-LUT kernels pad each row by 16 bytes (rows 4·odd words apart: 8 distinct groups) and copy
// a page in 16 per-token runs instead of one (21–32% faster at 32 kv heads).
// Rows an odd multiple of 32 bytes apart (4 groups, 2-way: turbo slots at 8 heads, mse slots at
// 16) stay unpadded: where the CTA holds every kv head the per-token copies cost more than the
// conflicts, and where it holds 8 of them one tensor-map box per half beats padded per-token
// copies.
template <class C, bool P>
__host__ __device__ constexpr int ring_row_bytes(int hpc) {
  const int row = hpc * QCfg<C>::kSlot;
  return row + (QCfg<C>::kWide && !P && row % 64 == 0 ? 16 : 0);
}

// Whether a CTA holding hpc of the cache's kv heads can take each 16-token half of its ring as
// one tensor-map box (16 rows of hpc · slot bytes, landing dense: rows without a pad) — the
// condition for decode_kernel_tm. A box row is ≤ 256 elements of 8 bytes and a multiple of 16
// bytes; a half (16 rows) is then a multiple of 128 bytes, the alignment a box's shared
// destination needs. Instead of 16 bulk copies of hpc · slot bytes per half: every copy costs
// the CTA (see decode_heads_per_cta). At 8 heads every wide-LUT format's rows qualify (mse
// slots 6 mod 8 bytes, turbo slots 4 mod 8).
template <class C>
constexpr bool tm_rows(int hpc) {
  const int row = hpc * QCfg<C>::kSlot;
  return QCfg<C>::kWide && ring_row_bytes<C, false>(hpc) == row && row % 16 == 0 && row <= 256 * 8;
}
// Whether a launch takes the TM variant: only the compile-time 8-head kernels have it (16 heads'
// rows are longer than a box row or padded), where tm_rows holds. (The launch falls back to
// per-token copies if the map cannot be encoded.)
template <class C>
constexpr bool tm_copies(bool planes, bool sliced, int hpc, int n_kv_heads) {
  return !planes && !sliced && hpc < n_kv_heads && hpc == 8 && tm_rows<C>(hpc);
}

// The compile-time shape of one instantiation of the quantized decode kernel (decode_kernel.cuh):
// the format, the cache layout, how the query columns are laid out, how many kv heads a CTA
// holds, and the choices of data layout in registers and shared memory that follow from them.
// pick_kernel maps a launch's DecodeKernelSel to one of these.
template <class Fmt, bool Planes, bool Packed, int Heads, QuerySlicing Slicing, bool TensorMap, bool Causal = false,
          int NTiles = 1, bool CtaMerge = false>
struct KernelTraits {
  using C = Fmt;
  using Q = QCfg<Fmt>;
  static constexpr int D = Q::D, kSlot = Q::kSlot;

  static constexpr bool kPlanes = Planes;  // the plane layout (tq/cuda/paged.h), else vLLM's
  // G ≤ 4: query heads 0–3 in fp16 hi in MMA columns 0–3 and their lo parts in columns 4–7 of one
  // MMA; G > 4: hi and lo as two MMAs
  static constexpr bool kPacked = Packed;
  // kv heads per CTA known at compile time (8, 4, 16, 2: every row stride and ring offset is an
  // immediate), or 0: DecodeArgs::heads_per_cta
  static constexpr int kHeads = Heads;
  static constexpr QuerySlicing kSlicing = Slicing;
  static constexpr bool kSliced = Slicing != QuerySlicing::whole;  // columns are a slice of G > 8 (dev::query_head)
  static constexpr int kSlices = Slicing == QuerySlicing::both ? 2 : 1;  // query slices per CTA
  // 8 < columns ≤ 16 per kv head (G, or q_len · G): N-tiles of 8 query columns per warp, each
  // decoded key and value fragment feeding the MMAs of all of them (2: 16 columns per warp). A
  // second tile's value accumulators and query fragments take about 80 registers beyond the 128
  // that 16 warps per SM allow, so its CTAs have 8 warps, one per SM (255 registers: 250 at d 128,
  // 4bit_nc).
  static constexpr int kNTiles = NTiles;
  static constexpr int kCtaWarps = NTiles > 1 ? kMqTileWarps : Q::kCtaWarps;
  // warps per head (= 32-token sub-tiles per stage) at compile time, or 0: DecodeArgs::warps_per_head
  static constexpr int kWarpsPerHead = Heads > 0 ? kCtaWarps / (kSlices * Heads) : 0;
  // each 16-token half of the ring is one box of the tensor map in DecodeTablesTm (tm_copies)
  static constexpr bool kTensorMap = TensorMap;
  // multi-query: per-column causal limits (MultiQuery, CausalTables); sub-tiles that reach past the
  // first column's limit take the masked body
  static constexpr bool kCausal = Causal;
  // the CTA merges its warps' parts in shared memory after the main loop (DecodeArgs::merge,
  // merge_warp_parts): single-query, one N-tile, ≤ 4 kv heads per CTA (so ≥ 4 warps per head). A separate
  // instantiation, so the kernels without it keep their code (the merge's registers moved ptxas's
  // schedules: +0.4 … +5.6% at batch 1, 4K, 32/8 where it was only compiled in)
  static constexpr bool kCtaMerge = CtaMerge;

  static_assert(!TensorMap || (Heads == 8 && !Planes && Slicing == QuerySlicing::whole && tm_rows<Fmt>(8)),
                "tensor-map boxes: 8-head kernels whose rows tm_rows accepts");
  static_assert(!Planes || (Q::kMse && Fmt::kValueBits == 4 && Q::kSlot == Fmt::kIdxBytes + Fmt::kValueCodeBytes + 6),
                "plane layout: mse keys, 4-bit values, no pad byte");
  static_assert(!(Packed && Slicing == QuerySlicing::both), "two query slices have G > 8 columns");
  static_assert(!CtaMerge || (NTiles == 1 && !Causal && !TensorMap && !Planes && Slicing == QuerySlicing::whole &&
                              (Heads == 0 || Heads == 2 || Heads == 4)),
                "the CTA merge: single-query kernels of ≤ 4 kv heads per CTA (or run-time heads)");

  // query fragment sets: hi + lo packed in one, or hi and lo
  static constexpr int kQSets = Packed ? 1 : 2;
  // G > 4, one value block, no QJL term: P' = fp16(p·scale) alone (half the value MMAs), and the
  // weights summed into Σp and Σp·zero are the ones P' carries, p̃ = fp16(P') / scale, so the output
  // stays a weighted mean of the values (each weight off by at most half an fp16 ulp of p·scale).
  static constexpr bool kHiOnlyP = !Packed && !Q::kQjl && Q::kTB == 1;
  static constexpr int kPSets = kHiOnlyP ? 1 : kQSets;  // P' fragment sets the value MMAs use
  static_assert(NTiles == 1 || (NTiles == 2 && Slicing == QuerySlicing::one && !Planes && !TensorMap && kHiOnlyP &&
                                mq_column_tiles<Fmt>() == 2),
                "two N-tiles per warp: sliced kernels of the formats mq_column_tiles names");

  // 3-bit mse keys, d = 128, vLLM layout: each lane reads its own 12-byte run of a key and takes its
  // pairs' LUT addresses with run_lut_addrs
  static constexpr bool kKeyRuns = Q::kSqLut && Fmt::kKeyBits == 3 && D == 128 && !Planes;
  // Score accumulator sets: the lo MMA accumulates onto the hi one (one set) in the single-query G > 4 kernels of
  // the 3-bit keys with compile-time kv heads. They sit at the 128-register cap of 16 warps per SM, and the 8
  // registers per N-tile this frees keep them from spilling (k3v4_nc at 32/4 on an H100: 0.4-0.9% faster).
  // Elsewhere hi and lo keep a set each (kQSets).
  static constexpr bool kOneScoreAcc = !Packed && NTiles == 1 && !Causal && kKeyRuns && Heads > 0;
  static constexpr int kScoreSets = kOneScoreAcc ? 1 : kQSets;

  // Compile-time kv heads, d ≤ 128, not packed (G > 4, and every multi-query and two-tile kernel): the warp's query
  // rows (4 pairs of heads per N-tile, QRaw) are loaded into registers at kernel entry as kPacked's are, instead of
  // head after head in the prologue, where each load waited behind every CTA's ring fill (it takes 40% off the
  // prologue of 4bit_nc at 16/2, 32K, B 32 on an H100). 3-bit keys at d 128 (kKeyRuns, short of registers) only
  // with ≤ 4 kv heads per CTA and the head loop unrolled (query_frags): with 8, 3bit_nc measured slower.
  static constexpr bool kRawRows = !Packed && D <= 128 && Heads > 0 && !TensorMap && (!kKeyRuns || Heads <= 4);

  // Tokens of the MMA rows (any order of a half's 16 tokens works, the values' k-slots following
  // the score rows). Keys: lane (r, p) reads rows r and r + 8 at word 4p …; with a row stride of
  // 4·odd mod 32 words rows 0–7 fall in 8 distinct 4-bank groups; with a stride ≡ 2 mod 4 words
  // (4 heads) rows r and r + 5 share banks and even tokens do not: there row r is token 2r and row
  // r + 8 token 2r + 1 (value k-slots 2p, 2p+1, 2p+8, 2p+9 are then tokens 4p, 4p+2, 4p+1, 4p+3).
  static constexpr bool kEvenOddRows = !Planes && Heads > 0 && (Heads * kSlot) % 16 == 8;
  // Values: lanes (·, p) read k-slot 2p's token; with a stride ≡ 8 mod 16 words tokens 0, 2, 4, 6
  // fall on two bank groups: there row r is token r/2 + 4·(r & 1) (k-slots 2p, 2p+1 are tokens p,
  // p + 4). Not for 3-bit mse keys, where it measured slower.
  static constexpr bool kSpreadRows =
      !Planes && Heads > 0 && (Heads * kSlot) % 64 == 32 && !(Q::kMse && Fmt::kKeyBits == 3);
  // token of row r + 8 / of k-slot 2p+1, minus that of row r / of k-slot 2p
  static constexpr int kRow8Delta = kEvenOddRows ? 1 : 8;
  static constexpr int kSlot1Delta = kEvenOddRows ? 2 : kSpreadRows ? 4 : 1;

  // 4-bit values, vLLM layout, 8 or 16 heads per CTA, G ≤ 4, d = 128, one value block ("value
  // pairs"): the k slots of each value MMA are (token, e) pairs and an m-tile covers 32 dims, e = 0
  // in P' columns 0–3 (query heads 0–3) and e = 1 in columns 4–7, P' = fp16(p·scale) alone (as
  // kHiOnlyP). Both halves of an A register are then one token's codes, masked in place from one
  // aligned 4-byte word, and the accumulator is 16 registers instead of 32. Lane (r, p) reads the
  // words r and r + 8 of the value codes of the tokens of k slots p and p + 4: score rows σp, σp + 1
  // (σ = kValueRowStep = 2) or p, p + 4 (σ = 1), σ the step that puts the four slot lanes' words on
  // disjoint 8-bank groups (row stride · σ ≡ ±8 words mod 32; 0: there is none).
  static constexpr int kValueStrideWords = (ring_row_bytes<Fmt, Planes>(Heads > 0 ? Heads : 1) / 4) % 32;
  static constexpr int kValueRowStep = kValueStrideWords % 16 == 8 ? 1 : kValueStrideWords % 8 == 4 ? 2 : 0;
  static constexpr bool kValuePairs = Fmt::kValueBits == 4 && !Q::kTurbo && !Q::kQjl && Q::kTB == 1 && !Planes &&
                                      !TensorMap && Packed && (Heads == 8 || Heads == 16) && D == 128 &&
                                      !kEvenOddRows && !kSpreadRows &&
                                      ring_row_bytes<Fmt, Planes>(Heads > 0 ? Heads : 1) % 4 == 0 && kValueRowStep > 0;
  // 4-bit values, vLLM layout, d = 128, where kValuePairs does not apply: each lane row reads its codes as aligned
  // 4-byte words instead of u16 (half the shared-memory wavefronts where a warp's codes are word aligned). In the
  // 16-head G ≤ 4 kernels and the G > 4 kernels of 2 and 4 kv heads with the CTA merge (k3v4_nc at 16/2, B 32, 32K:
  // 1% faster on an H100). Not in those without the merge, the ones batch-1 decodes take, which it made slower (the
  // cause was not found).
  static constexpr bool kValueWords =
      Fmt::kValueBits == 4 && !Q::kTurbo && !Planes && D == 128 && !kValuePairs &&
      ((Packed && Heads == 16) || (!Packed && NTiles == 1 && CtaMerge && (Heads == 2 || Heads == 4)));
  static_assert(!kValueWords || ring_row_bytes<Fmt, Planes>(Heads) % 4 == 0, "the code offset is the same in every row");
  // Where token rows and pieces are 4-byte aligned, a warp's key slots start 0 or 2 bytes into a
  // word in every row: the full sub-tiles then run a body compiled for that offset (no run
  // alignment shifts, no predicated loads for the other case). Only where it measured faster
  // (3-bit keys, 8 heads per CTA, G ≤ 4).
  static constexpr bool kKeyOffBodies = kKeyRuns && Packed && Heads == 8 && ring_row_bytes<Fmt, Planes>(Heads) % 4 == 0;
  static constexpr int kAccTiles = kValuePairs ? D / 32 : D / 16;  // value m-tiles (kValuePairs: 32 dims each)

  // The per-warp register arrays of the kernel (turbo4-qjl's sign term arrays have extent 1 otherwise).
  static constexpr bool kQjl = Q::kQjl;
  // kPacked: the query heads' elements lane + 32k as loaded, two heads each (kRawRows: heads 2i, 2i + 1 in [i])
  using QRaw = __half2[kPacked ? 2 : kRawRows ? 4 * NTiles : 1][D / 32];
  using QFrags = uint32_t[kQSets][Q::kKSteps][2];                   // query fragments [hi/lo set][k-step][b0/b1]
  using QjlFrags = uint32_t[kQjl ? kQSets : 1][kQjl ? Q::kKSteps : 1][2];  // of q″ = R q′
  using Scores = float[Q::kTB][2][kScoreSets][4];                  // [turbo block][half][hi/lo set][row/column]
  using QjlScores = float[kQjl ? Q::kTB : 1][2][kQSets][4];          // q″ · (±1)
  using PFrags = uint32_t[Q::kTB][2][kQSets][2];                   // P' [turbo block][half][hi/lo set][b0/b1]
  using QjlPFrags = uint32_t[kQjl ? Q::kTB : 1][2][kQSets][2];       // P″
  using PairPFrags = uint32_t[kValuePairs ? 4 : 1][2];             // kValuePairs: the B of k-step j
  using Acc = float[kAccTiles][4];                                 // Σ P'·codes, per value m-tile
  using QjlAcc = float[kQjl ? D / 16 : 1][4];                       // Σ P″·(±1), rotated by R⁻¹ at the write-out
};

}  // namespace

}  // namespace tq::cuda
