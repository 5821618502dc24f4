//! `call`, `ret` and `__assertfail`. Each lane keeps its own call stack of return pcs; a
//! function's parameters and return values live in the lane's local frame (see `decode`). A
//! call to a function already on the lane's stack (recursion) saves that function's registers
//! and frame first and restores them when it returns. Stacks deeper than [`MAX_CALL_DEPTH`]
//! stop the lane with a `CallDepthExceeded` finding, like a stack overflow on the device.

use super::global::GlobalSpace;
use super::{lanes, BlockCtx, Engine, Flow, Warp, WARP};
use crate::decode::{ArgSrc, AssertFail, Call, Op, RetDst};
use crate::findings::FindingKind;
use crate::memory::{read_bytes, write_bytes};

/// Calls a thread may have pending at once.
pub const MAX_CALL_DEPTH: usize = 1024;

/// A pending call of one lane.
#[derive(Debug, Clone)]
pub(crate) struct Frame {
    call_pc: u32,
    func: u32,
    /// The callee's registers and frame as they were before a recursive call.
    saved: Option<Box<(Vec<u64>, Vec<u8>)>>,
}

/// Longest C string read for an assertion message.
const MAX_MESSAGE: usize = 512;

impl<G: GlobalSpace> Engine<'_, G> {
    fn frame_base(&self, l: usize) -> u64 {
        l as u64 * self.spec.prog.local_size
    }

    /// Reads an argument's `size` bytes (little-endian, at most 8) for lane `l`.
    fn arg_value(&self, bc: &BlockCtx, w: &Warp, a: ArgSrc, size: u64, l: usize) -> u64 {
        match a {
            ArgSrc::Local(off) => {
                read_bytes(&w.local, self.frame_base(l) + off, size.min(8) as usize).unwrap_or(0)
            }
            ArgSrc::Value(s) => self.rd(bc, w, s, l),
        }
    }

    pub(super) fn call(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        c: &Call,
        pc: u32,
        group: u32,
        exec: u32,
    ) -> Flow {
        let prog = self.spec.prog;
        let info = &prog.funcs[c.func as usize];
        let (regs, frame) = (info.regs, info.local);
        for l in lanes(exec) {
            if w.calls[l].len() >= MAX_CALL_DEPTH {
                self.report(
                    bc,
                    w,
                    l,
                    pc,
                    FindingKind::CallDepthExceeded,
                    format!(
                        "call depth exceeds {MAX_CALL_DEPTH} (unbounded recursion?) calling `{}`",
                        info.name
                    ),
                    None,
                );
                self.fault_lane(bc, w, l);
                continue;
            }
            let base = self.frame_base(l) as usize;
            // Arguments are read before anything is written: a recursive call passes values
            // from the frame it is about to reuse.
            let mut bytes = Vec::new();
            for &(src, _, size) in &c.args {
                match src {
                    ArgSrc::Local(off) => {
                        let at = base + off as usize;
                        bytes.extend_from_slice(&w.local[at..at + size as usize]);
                    }
                    ArgSrc::Value(s) => {
                        let v = self.rd(bc, w, s, l).to_le_bytes();
                        bytes.extend((0..size as usize).map(|i| v.get(i).copied().unwrap_or(0)));
                    }
                }
            }
            let saved = w.calls[l].iter().any(|f| f.func == c.func).then(|| {
                let r = (regs.0..regs.1)
                    .map(|r| w.regs[r as usize * WARP + l])
                    .collect();
                let f = w.local[base + frame.0 as usize..base + frame.1 as usize].to_vec();
                Box::new((r, f))
            });
            let mut at = 0;
            for &(_, off, size) in &c.args {
                let dst = base + off as usize;
                w.local[dst..dst + size as usize].copy_from_slice(&bytes[at..at + size as usize]);
                at += size as usize;
            }
            w.calls[l].push(Frame {
                call_pc: pc,
                func: c.func,
                saved,
            });
        }
        let called = exec & w.running;
        if called == group {
            return Flow::Jump(c.target);
        }
        for l in lanes(group & w.running) {
            w.pc[l] = if called & (1 << l) != 0 {
                c.target
            } else {
                pc + 1
            };
        }
        Flow::Split
    }

    pub(super) fn ret(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        pc: u32,
        group: u32,
        exec: u32,
    ) -> Flow {
        let mut exiting = 0u32;
        for l in lanes(exec) {
            let Some(frame) = w.calls[l].pop() else {
                exiting |= 1 << l;
                continue;
            };
            let prog = self.spec.prog;
            let Some(Op::Call(c)) = prog.insts.get(frame.call_pc as usize).map(|i| &i.op) else {
                continue;
            };
            let base = self.frame_base(l) as usize;
            let values: Vec<u64> = c
                .rets
                .iter()
                .map(|&(off, _, size)| {
                    read_bytes(&w.local, (base as u64) + off, size.min(8) as usize).unwrap_or(0)
                })
                .collect();
            if let Some(saved) = frame.saved {
                let info = &prog.funcs[frame.func as usize];
                for (i, r) in (info.regs.0..info.regs.1).enumerate() {
                    w.regs[r as usize * WARP + l] = saved.0[i];
                }
                let at = base + info.local.0 as usize;
                w.local[at..at + saved.1.len()].copy_from_slice(&saved.1);
            }
            for (&(_, dst, size), v) in c.rets.iter().zip(values) {
                match dst {
                    RetDst::Local(off) => {
                        write_bytes(&mut w.local, base as u64 + off, size.min(8) as usize, v);
                    }
                    RetDst::Reg(r) => w.regs[r as usize * WARP + l] = v,
                }
            }
            w.pc[l] = frame.call_pc + 1;
        }
        if exiting != 0 {
            self.exit_lanes(bc, w, pc, exiting);
        }
        for l in lanes(group & !exec & w.running) {
            w.pc[l] = pc + 1;
        }
        Flow::Split
    }

    /// `__assertfail(message, file, line, function, char_size)`: the lanes stop with an
    /// `AssertFailed` finding quoting the assertion.
    pub(super) fn assert_fail(
        &mut self,
        bc: &mut BlockCtx,
        w: &mut Warp,
        a: &AssertFail,
        pc: u32,
        exec: u32,
    ) {
        for l in lanes(exec) {
            let text = |s: &Self, src| s.c_string(s.arg_value(bc, w, src, 8, l));
            let message = text(self, a.message);
            let file = text(self, a.file);
            let function = text(self, a.function);
            let line = self.arg_value(bc, w, a.line, 4, l) as u32;
            self.report(
                bc,
                w,
                l,
                pc,
                FindingKind::AssertFailed,
                format!("{file}:{line}: {function}: assertion `{message}` failed"),
                None,
            );
            self.fault_lane(bc, w, l);
        }
    }

    /// The NUL-terminated string at global address `addr` (lossy UTF-8, at most
    /// [`MAX_MESSAGE`] bytes; `?` when unreadable).
    fn c_string(&self, addr: u64) -> String {
        let mut bytes = Vec::new();
        for i in 0..MAX_MESSAGE as u64 {
            let Ok((b, o)) = self.global.locate(addr + i, 1) else {
                break;
            };
            match self.global.read(b, o, 1) as u8 {
                0 => break,
                c => bytes.push(c),
            }
        }
        if bytes.is_empty() {
            return "?".into();
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }
}
