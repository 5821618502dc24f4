//! The interpreter's float conversions and 16-bit arithmetic against an independent oracle
//! (`float_oracle/ieee.rs`, integer arithmetic from the IEEE 754 definitions). Every input runs
//! through a real PTX kernel (one thread per value), so parsing, decoding and execution are what
//! is checked, not the semantic helpers alone. 16-bit domains are covered exhaustively; wider ones
//! with every halfway point of the narrower format (and its neighbours) plus seeded samples.

#[path = "float_oracle/ieee.rs"]
mod ieee;

use ieee::{Format, Mode, BF16, F16, F32, F64, MODES};
use ptxforge_sim::{Arg, Device, Module, Options};

/// PTX spelling of a format: the `cvt`/arithmetic type and the register/memory type.
fn names(f: Format) -> (&'static str, &'static str) {
    match f {
        F16 => ("f16", "b16"),
        BF16 => ("bf16", "b16"),
        F32 => ("f32", "f32"),
        _ => ("f64", "f64"),
    }
}

/// Bytes of one element of a register type used here.
fn width(reg: &str) -> usize {
    match reg {
        "b16" => 2,
        "b32" | "f32" => 4,
        _ => 8,
    }
}

/// A kernel `out[i] = OP(in0[i], …)` over `n` threads; `op` names the sources `%s0…` and the
/// destination `%t`.
fn kernel(src_reg: &str, srcs: usize, dst_reg: &str, op: &str) -> String {
    let (sb, db) = (width(src_reg), width(dst_reg));
    let params: String = (0..srcs).map(|i| format!(".param .u64 pin{i}, ")).collect();
    let loads: String = (0..srcs)
        .map(|i| {
            format!(
                "\tld.param.u64 %rd1, [pin{i}];\n\tadd.s64 %rd1, %rd1, %rd3;\n\
                 \tld.global.{src_reg} %s{i}, [%rd1];\n"
            )
        })
        .collect();
    format!(
        ".version 7.8\n.target sm_90\n.address_size 64\n\
         .visible .entry k({params}.param .u64 pout, .param .u32 pn)\n{{\n\
         \t.reg .pred %p;\n\t.reg .b32 %r<5>;\n\t.reg .b64 %rd<5>;\n\
         \t.reg .{src_reg} %s<{srcs}>;\n\t.reg .{dst_reg} %t;\n\
         \tld.param.u32 %r1, [pn];\n\tmov.u32 %r2, %ctaid.x;\n\tmov.u32 %r3, %ntid.x;\n\
         \tmov.u32 %r4, %tid.x;\n\tmad.lo.u32 %r2, %r2, %r3, %r4;\n\
         \tsetp.ge.u32 %p, %r2, %r1;\n\t@%p bra DONE;\n\
         \tmul.wide.u32 %rd3, %r2, {sb};\n{loads}\
         \t{op}\n\
         \tld.param.u64 %rd2, [pout];\n\tmul.wide.u32 %rd4, %r2, {db};\n\
         \tadd.s64 %rd2, %rd2, %rd4;\n\tst.global.{dst_reg} [%rd2], %t;\n\
         DONE:\n\tret;\n}}\n"
    )
}

fn to_bytes(bits: &[u64], width: usize) -> Vec<u8> {
    bits.iter()
        .flat_map(|b| b.to_le_bytes()[..width].to_vec())
        .collect()
}

/// Runs `op` on every input column (bit patterns) and returns the output bit patterns.
fn run(src_reg: &str, dst_reg: &str, op: &str, inputs: &[Vec<u64>]) -> Vec<u64> {
    let n = inputs[0].len();
    let module = Module::parse(&kernel(src_reg, inputs.len(), dst_reg, op)).unwrap();
    let mut dev = Device::new();
    let mut args: Vec<Arg> = inputs
        .iter()
        .map(|col| Arg::Buffer(dev.upload(&to_bytes(col, width(src_reg)))))
        .collect();
    let out = dev.alloc(n * width(dst_reg));
    args.push(Arg::Buffer(out));
    args.push(Arg::U32(n as u32));
    let grid = n.div_ceil(256) as u32;
    let report = dev
        .launch(
            &module,
            "k",
            [grid, 1, 1],
            [256, 1, 1],
            0,
            &args,
            &Options::default(),
        )
        .unwrap();
    assert!(report.is_clean(), "{op}: {:?}", report.findings);
    dev.download::<u8>(out)
        .unwrap()
        .chunks(width(dst_reg))
        .map(|c| {
            let mut b = [0u8; 8];
            b[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(b)
        })
        .collect()
}

/// Compares interpreter and oracle results, reporting the first few mismatches in hex.
fn check(what: &str, inputs: &[Vec<u64>], got: &[u64], want: impl Fn(usize) -> u64) {
    let bad: Vec<String> = (0..got.len())
        .filter(|&i| got[i] != want(i))
        .take(8)
        .map(|i| {
            let ins: Vec<String> = inputs.iter().map(|c| format!("{:#x}", c[i])).collect();
            format!(
                "{} -> got {:#x}, want {:#x}",
                ins.join(", "),
                got[i],
                want(i)
            )
        })
        .collect();
    assert!(
        bad.is_empty(),
        "{what}: {} ...\n{}",
        bad.len(),
        bad.join("\n")
    );
}

/// splitmix64: a fixed seed gives the same samples on every run.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// Inputs in `wide` around every positive encoding of `narrow` picked by `pick`: the value, the
/// halfway point to its successor (ties), and the wide neighbours of both; both signs.
fn boundaries(narrow: Format, wide: Format, picks: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut v = Vec::new();
    let sign = 1u64 << (wide.bits() - 1);
    for b in picks {
        let ieee::Value::Finite { sig, exp, .. } = narrow.decode(b) else {
            continue;
        };
        let (nsig, nexp) = narrow.next_up_magnitude(b);
        // (a + b) / 2 on the common exponent of the two neighbours.
        let common = exp.min(nexp);
        let mid = (sig << (exp - common)) + (nsig << (nexp - common));
        let lo = common - 1;
        let x = wide.exact(false, sig, exp);
        let m = wide.exact(false, mid, lo);
        for w in [x, x + 1, m - 1, m, m + 1] {
            v.push(w);
            v.push(w | sign);
        }
        if x > 0 {
            v.push(x - 1);
        }
    }
    v
}

/// Seeded wide bit patterns: uniform ones plus NaN payloads, infinities, zeros and subnormals.
fn samples(f: Format, count: usize, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed);
    let mask = if f.bits() == 64 {
        u64::MAX
    } else {
        (1 << f.bits()) - 1
    };
    let inf = f.inf(false);
    let mut v: Vec<u64> = (0..count).map(|_| rng.next() & mask).collect();
    let frac = (1u64 << f.frac_bits) - 1;
    v.extend([
        0,
        1,
        frac,
        frac + 1,
        inf - 1,
        inf,
        inf + 1,
        inf | frac,
        inf + (frac >> 1) + 1,
    ]);
    let sign = 1u64 << (f.bits() - 1);
    let negated: Vec<u64> = v.iter().map(|b| b ^ sign).collect();
    v.extend(negated);
    v
}

/// Checks `cvt` from `src` to `dst` on `inputs`, in every rounding mode when it narrows.
fn check_cvt(src: Format, dst: Format, inputs: Vec<u64>) {
    let (s, sr) = names(src);
    let (d, dr) = names(dst);
    let widening = src.frac_bits <= dst.frac_bits && src.exp_bits <= dst.exp_bits;
    let modes: &[(Mode, &str)] = if widening {
        &[(Mode::NearestEven, "")]
    } else {
        &MODES
    };
    let cols = vec![inputs];
    for &(mode, rnd) in modes {
        let dot = if rnd.is_empty() { "" } else { "." };
        let op = format!("cvt{dot}{rnd}.{d}.{s} %t, %s0;");
        let got = run(sr, dr, &op, &cols);
        check(&op, &cols, &got, |i| {
            ieee::convert(src, dst, cols[0][i], mode)
        });
    }
}

fn all16() -> Vec<u64> {
    (0..=0xffff).collect()
}

#[test]
fn widening_from_16_bit_formats_exhaustive() {
    for src in [F16, BF16] {
        check_cvt(src, F32, all16());
        check_cvt(src, F64, all16());
    }
}

#[test]
fn between_16_bit_formats_exhaustive_all_modes() {
    check_cvt(F16, BF16, all16());
    check_cvt(BF16, F16, all16());
}

#[test]
fn f32_to_16_bit_formats_halfway_points_and_samples_all_modes() {
    for dst in [F16, BF16] {
        let mut inputs = boundaries(dst, F32, 0..dst.inf(false));
        inputs.extend(samples(F32, 1 << 16, 0x5eed_0016 + u64::from(dst.exp_bits)));
        check_cvt(F32, dst, inputs);
    }
}

#[test]
fn f64_narrowing_halfway_points_and_samples_all_modes() {
    let mut rng = Rng(0xf64);
    for dst in [F32, F16, BF16] {
        let picks: Vec<u64> = if dst == F32 {
            let mut p: Vec<u64> = (0..1 << 14).map(|_| rng.next() & 0x7f7f_ffff).collect();
            p.extend([0, 1, 0x007f_ffff, 0x0080_0000, 0x7f7f_fffe, 0x7f7f_ffff]);
            p
        } else {
            (0..dst.inf(false)).collect()
        };
        let mut inputs = boundaries(dst, F64, picks.into_iter());
        inputs.extend(samples(F64, 1 << 14, 0x5eed_0064));
        check_cvt(F64, dst, inputs);
    }
}

#[test]
fn f32_to_f64_samples() {
    check_cvt(F32, F64, samples(F32, 1 << 16, 0x5eed_3264));
}

/// Operand pairs/triples for 16-bit arithmetic: uniform bit patterns, operands with nearby
/// exponents (cancellation, carries, ties) and every combination of the special values.
fn operands16(f: Format, arity: usize, count: usize, seed: u64) -> Vec<Vec<u64>> {
    let mut rng = Rng(seed);
    let mut cols = vec![Vec::new(); arity];
    let exp_mask = ((1u64 << f.exp_bits) - 1) << f.frac_bits;
    for k in 0..count {
        let first = rng.next() & 0xffff;
        cols[0].push(first);
        for col in cols.iter_mut().skip(1) {
            let r = rng.next();
            let v = if k % 2 == 0 {
                r & 0xffff
            } else {
                // Same exponent field as the first operand, moved by at most ±3 binades.
                let shift = ((r >> 20) % 7) as i64 - 3;
                let e = ((first & exp_mask) >> f.frac_bits) as i64 + shift;
                let e = e.clamp(0, (1 << f.exp_bits) - 1) as u64;
                (r & 0x8000) | (e << f.frac_bits) | (r & ((1 << f.frac_bits) - 1))
            };
            col.push(v);
        }
    }
    let inf = f.inf(false);
    let frac = (1u64 << f.frac_bits) - 1;
    let one = ieee::convert(F32, f, 0x3f80_0000, Mode::NearestEven);
    let mut specials = vec![0, 1, frac, frac + 1, one, one + 1, inf - 1, inf, inf + 1];
    specials.extend(specials.clone().iter().map(|b| b | 0x8000));
    let mut combos = vec![Vec::new()];
    for _ in 0..arity {
        combos = combos
            .iter()
            .flat_map(|c| {
                specials.iter().map(move |&s| {
                    let mut c = c.clone();
                    c.push(s);
                    c
                })
            })
            .collect();
    }
    for c in combos {
        for (col, v) in cols.iter_mut().zip(c) {
            col.push(v);
        }
    }
    cols
}

/// Checks `OP.rn.TYPE` (scalar) and `OP.rn.TYPEx2` (packed, the two lanes independent).
fn check_arith(f: Format, op: &str, arity: usize, oracle: impl Fn(&[u64]) -> u64) {
    let (t, _) = names(f);
    let cols = operands16(
        f,
        arity,
        1 << 17,
        0xa7 + arity as u64 + u64::from(f.exp_bits),
    );
    let regs: Vec<String> = (0..arity).map(|i| format!("%s{i}")).collect();
    let scalar = format!("{op}.rn.{t} %t, {};", regs.join(", "));
    let got = run("b16", "b16", &scalar, &cols);
    let lane =
        |i: usize, sh: u32| -> Vec<u64> { cols.iter().map(|c| (c[i] >> sh) & 0xffff).collect() };
    check(&scalar, &cols, &got, |i| oracle(&lane(i, 0)));
    // Packed: lane 0 takes row i, lane 1 row i+1 (wrapping), so both lanes see every row.
    let n = cols[0].len();
    let packed: Vec<Vec<u64>> = cols
        .iter()
        .map(|c| (0..n).map(|i| c[i] | (c[(i + 1) % n] << 16)).collect())
        .collect();
    let x2 = format!("{op}.rn.{t}x2 %t, {};", regs.join(", "));
    let got = run("b32", "b32", &x2, &packed);
    check(&x2, &packed, &got, |i| {
        oracle(&lane(i, 0)) | (oracle(&lane((i + 1) % n, 0)) << 16)
    });
}

#[test]
fn half_and_bfloat_add_mul_fma_against_oracle() {
    let rn = Mode::NearestEven;
    for f in [F16, BF16] {
        check_arith(f, "add", 2, |v| ieee::add(f, v[0], v[1], rn));
        check_arith(f, "mul", 2, |v| ieee::mul(f, v[0], v[1], rn));
        check_arith(f, "fma", 3, |v| ieee::fma(f, v[0], v[1], v[2], rn));
    }
}

/// Signed 64-bit integers around the halfway points of a `p`-bit significand (where one f64
/// rounding followed by a second one can land on the tie), plus uniform samples.
fn int_halfway_samples(p: u32, count: usize, seed: u64) -> Vec<u64> {
    let mut rng = Rng(seed);
    let mut v = Vec::new();
    for _ in 0..count {
        let r = rng.next();
        // An odd (p+1)-bit significand is a halfway point; nudge it below and above f64's reach.
        let mid = ((r >> 40) | (1 << p) | 1) & ((1 << (p + 1)) - 1);
        let shift = 10 + (r % (62 - u64::from(p) - 10)) as u32;
        let base = (mid << shift) as i64;
        let half_f64_ulp = 1i64 << (shift + p).saturating_sub(53);
        for d in [0, 1, -1, half_f64_ulp + 1, -half_f64_ulp - 1, half_f64_ulp] {
            let x = base.wrapping_add(d);
            v.push(x as u64);
            v.push(x.wrapping_neg() as u64);
        }
        v.push(rng.next());
    }
    v.extend([0, 1, u64::MAX, i64::MAX as u64, i64::MIN as u64]);
    v
}

#[test]
fn s64_to_float_halfway_points_all_modes() {
    for dst in [F32, F16, BF16] {
        let inputs = vec![int_halfway_samples(dst.frac_bits + 1, 1 << 12, 0x1e64)];
        let (d, dr) = names(dst);
        for (mode, rnd) in MODES {
            let op = format!("cvt.{rnd}.{d}.s64 %t, %s0;");
            let got = run("s64", dr, &op, &inputs);
            check(&op, &inputs, &got, |i| {
                let x = inputs[0][i] as i64;
                let (neg, mag) = (x < 0, u128::from(x.unsigned_abs()));
                dst.round(neg, mag, 0, false, mode)
            });
        }
    }
}
