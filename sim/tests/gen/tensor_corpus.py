#!/usr/bin/env python3
"""Writes the tensor-core corpus kernels (tests/ptx/mma_*.ptx, ldmatrix_*.ptx) with inputs and
expected outputs computed here, from the PTX ISA fragment formulas, independently of the
interpreter. Run from sim/: python3 tests/gen/tensor_corpus.py"""
import struct

def f16_bits(x):
    return struct.unpack('<H', struct.pack('<e', x))[0]

def bf16_bits(x):
    # Small integers are exact in bf16: the top half of the f32 pattern.
    return struct.unpack('<I', struct.pack('<f', x))[0] >> 16

def f32_bits(x):
    return struct.unpack('<I', struct.pack('<f', x))[0]

# ISA "Matrix Fragments for mma.m16n8k16 / m16n8k8": (row, col) of element i of a lane.
def a_pos(inp, lane, i):
    g, t = lane >> 2, lane % 4
    if inp == 'tf32':
        return (g + 8 * (i % 2), t + 4 * (i // 2))
    return (g + (8 if i in (2, 3, 6, 7) else 0), 2 * t + (i & 1) + (8 if i >= 4 else 0))

def b_pos(inp, lane, i):
    g, t = lane >> 2, lane % 4
    if inp == 'tf32':
        return (t + 4 * i, g)
    return (2 * t + (i & 1) + (8 if i >= 2 else 0), g)

def acc_pos(lane, i):
    g, t = lane >> 2, lane % 4
    return (g + (8 if i >= 2 else 0), 2 * t + (i & 1))

def pack(vals, elem_bits, to_bits):
    """Per lane: elements (low to high) into 32-bit words, padded to 4 words."""
    words = []
    per = 32 // elem_bits
    for i in range(0, len(vals), per):
        w = 0
        for j, v in enumerate(vals[i:i + per]):
            w |= to_bits(v) << (elem_bits * j)
        words.append(w)
    return words + [0] * (4 - len(words))

def mma_case(name, k, inp, dt, ct, target):
    A = [[((r * k + c) * 5 % 11) - 5 for c in range(k)] for r in range(16)]
    B = [[((kk * 8 + n) * 3 % 7) - 3 for n in range(8)] for kk in range(k)]
    C = [[((r * 8 + n) * 7 % 13) - 6 for n in range(8)] for r in range(16)]
    D = [[C[r][n] + sum(A[r][kk] * B[kk][n] for kk in range(k)) for n in range(8)] for r in range(16)]
    in_bits = {'f16': (16, f16_bits), 'bf16': (16, bf16_bits), 'tf32': (32, f32_bits)}[inp]
    acc_bits = lambda t: (16, f16_bits) if t == 'f16' else (32, f32_bits)
    a, b, c, d = [], [], [], []
    for lane in range(32):
        a += pack([A[r][cc] for r, cc in (a_pos(inp, lane, i) for i in range(k // 2))], *in_bits)
        b += pack([B[r][cc] for r, cc in (b_pos(inp, lane, i) for i in range(k // 4))], *in_bits)
        c += pack([C[r][cc] for r, cc in (acc_pos(lane, i) for i in range(4))], *acc_bits(ct))
        d += pack([D[r][cc] for r, cc in (acc_pos(lane, i) for i in range(4))], *acc_bits(dt))
    na = len([w for w in pack([0] * (k // 2), in_bits[0], lambda v: 1)])
    regs = lambda first, n: '{' + ', '.join(f'%r{first + i}' for i in range(n)) + '}'
    n_a = k // 2 * in_bits[0] // 32
    n_b = k // 4 * in_bits[0] // 32
    n_c = 4 * acc_bits(ct)[0] // 32
    n_d = 4 * acc_bits(dt)[0] // 32
    lst = lambda ws: ','.join(str(w) for w in ws)
    text = f"""// mma.sync.aligned.m16n8k{k}.row.col.{dt}.{inp}.{inp}.{ct}: every lane loads its raw fragment
// registers (4 words per lane, unused words ignored) and stores D's. Inputs and expected D come
// from tests/gen/tensor_corpus.py (ISA fragment formulas, small integers: exact in every order).
// case: --entry {name} --grid 1 --block 32 --buf a=u32:list:{lst(a)} --buf b=u32:list:{lst(b)} --buf c=u32:list:{lst(c)} --buf d=u32:zeros:128 --arg a --arg b --arg c --arg d
// expect: d=u32:{lst(d)}
.version 7.0
.target {target}
.address_size 64

.visible .entry {name}(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 pd)
{{
	.reg .b32 %r<24>;
	.reg .b64 %rd<12>;
	ld.param.u64 %rd1, [pa];
	ld.param.u64 %rd2, [pb];
	ld.param.u64 %rd3, [pc];
	ld.param.u64 %rd4, [pd];
	mov.u32 %r0, %tid.x;
	mul.wide.u32 %rd5, %r0, 16;
	add.s64 %rd6, %rd1, %rd5;
	add.s64 %rd7, %rd2, %rd5;
	add.s64 %rd8, %rd3, %rd5;
	add.s64 %rd9, %rd4, %rd5;
	ld.global.v4.b32 {{%r1, %r2, %r3, %r4}}, [%rd6];
	ld.global.v4.b32 {{%r5, %r6, %r7, %r8}}, [%rd7];
	ld.global.v4.b32 {{%r9, %r10, %r11, %r12}}, [%rd8];
	mov.b32 %r13, 0;
	mov.b32 %r14, 0;
	mov.b32 %r15, 0;
	mov.b32 %r16, 0;
	mma.sync.aligned.m16n8k{k}.row.col.{dt}.{inp}.{inp}.{ct} {regs(13, n_d)}, {regs(1, n_a)}, {regs(5, n_b)}, {regs(9, n_c)};
	st.global.v4.b32 [%rd9], {{%r13, %r14, %r15, %r16}};
	ret;
}}
"""
    open(f'tests/ptx/{name}.ptx', 'w').write(text)

mma_case('mma_m16n8k16_f32_f16', 16, 'f16', 'f32', 'f32', 'sm_80')
mma_case('mma_m16n8k16_f32_bf16', 16, 'bf16', 'f32', 'f32', 'sm_80')
mma_case('mma_m16n8k16_f16_f16', 16, 'f16', 'f16', 'f16', 'sm_80')
mma_case('mma_m16n8k8_f32_f16', 8, 'f16', 'f32', 'f32', 'sm_75')
mma_case('mma_m16n8k8_f32_tf32', 8, 'tf32', 'f32', 'f32', 'sm_80')

# ldmatrix: a 32x(stride) b16 tile in shared memory holding iota (element value = its index in
# the tile), row stride `stride` elements. Lane l gives the address of row `row_of(l)`.
def ldmatrix_case(name, num, trans, stride):
    rows = 8 * num
    tile = [[r * stride + c for c in range(stride)] for r in range(32)]
    # Lanes 8i..8i+7 give matrix i's rows; use a permuted row order to pin the mapping:
    # lane l -> tile row (l * 5) % 32 (a bijection on 0..31).
    row_of = lambda l: (l * 5) % 32
    mats = [[tile[row_of(8 * i + r)][:8] for r in range(8)] for i in range(num)]
    out = []
    for l in range(32):
        words = []
        for i in range(num):
            m = mats[i]
            if trans:
                lo, hi = m[2 * (l % 4)][l // 4], m[2 * (l % 4) + 1][l // 4]
            else:
                lo, hi = m[l // 4][2 * (l % 4)], m[l // 4][2 * (l % 4) + 1]
            words.append(lo | (hi << 16))
        out += words + [0] * (4 - num)
    regs = '{' + ', '.join(f'%r{10 + i}' for i in range(num)) + '}'
    tr = '.trans' if trans else ''
    nelem = 32 * stride
    text = f"""// ldmatrix.sync.aligned.m8n8.x{num}{tr}.shared.b16 from an iota tile (value = element index,
// row stride {stride} elements); lane l points at tile row (5l mod 32), so each lane's role is
// pinned. Expected registers from tests/gen/tensor_corpus.py (ISA ldmatrix mapping).
// case: --entry {name} --grid 1 --block 32 --buf out=u32:zeros:128 --arg out
// expect: out=u32:{','.join(str(w) for w in out)}
.version 7.0
.target sm_75
.address_size 64

.visible .entry {name}(.param .u64 pout)
{{
	.reg .pred %p<2>;
	.reg .b32 %r<20>;
	.reg .b64 %rd<8>;
	.shared .align 16 .b16 tile[{nelem}];
	ld.param.u64 %rd1, [pout];
	mov.u32 %r0, %tid.x;
	mov.u32 %r1, tile;
	// Fill the tile: thread t writes elements t, t + 32, ...
	mov.u32 %r2, %r0;
$L__fill:
	shl.b32 %r3, %r2, 1;
	add.s32 %r4, %r1, %r3;
	st.shared.u16 [%r4], %r2;
	add.s32 %r2, %r2, 32;
	setp.lt.u32 %p1, %r2, {nelem};
	@%p1 bra $L__fill;
	bar.sync 0;
	// Row address: tile + ((5 * lane) % 32) * stride * 2.
	mul.lo.u32 %r5, %r0, 5;
	and.b32 %r5, %r5, 31;
	mul.lo.u32 %r6, %r5, {stride * 2};
	add.s32 %r7, %r1, %r6;
	mov.b32 %r10, 0;
	mov.b32 %r11, 0;
	mov.b32 %r12, 0;
	mov.b32 %r13, 0;
	ldmatrix.sync.aligned.m8n8.x{num}{tr}.shared.b16 {regs}, [%r7];
	mul.wide.u32 %rd2, %r0, 16;
	add.s64 %rd3, %rd1, %rd2;
	st.global.v4.b32 [%rd3], {{%r10, %r11, %r12, %r13}};
	ret;
}}
"""
    open(f'tests/ptx/{name}.ptx', 'w').write(text)

ldmatrix_case('ldmatrix_x1', 1, False, 8)
ldmatrix_case('ldmatrix_x2', 2, False, 16)
ldmatrix_case('ldmatrix_x4', 4, False, 24)
ldmatrix_case('ldmatrix_x1_trans', 1, True, 16)
ldmatrix_case('ldmatrix_x2_trans', 2, True, 8)
ldmatrix_case('ldmatrix_x4_trans', 4, True, 24)
