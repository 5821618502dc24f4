//! Structured control flow: each helper allocates and places its own labels, so a label can
//! never be left unplaced by a template.

use super::types::{Pred, Reg, Val, U32};
use super::KernelBuilder;

impl KernelBuilder {
    /// Runs `body` only in threads where `cond` holds.
    ///
    /// Do not put `bar_sync` inside: threads where `cond` fails would skip it.
    pub fn if_then(&mut self, cond: Pred, body: impl FnOnce(&mut Self)) {
        let end = self.label("endif");
        self.bra_if(cond, true, end);
        body(self);
        self.place(end);
    }

    /// Runs `then` where `cond` holds and `otherwise` elsewhere.
    pub fn if_else(
        &mut self,
        cond: Pred,
        then: impl FnOnce(&mut Self),
        otherwise: impl FnOnce(&mut Self),
    ) {
        let else_label = self.label("else");
        let end = self.label("endif");
        self.bra_if(cond, true, else_label);
        then(self);
        self.bra(end);
        self.place(else_label);
        otherwise(self);
        self.place(end);
    }

    /// Runs `body(i)` with the thread's global x index `i = ctaid.x · ntid.x + tid.x` in the
    /// threads where `i < n`: the guard of every one-element-per-thread kernel. No barrier
    /// may sit in `body`.
    pub fn for_global_index(
        &mut self,
        n: impl Into<Val<U32>>,
        body: impl FnOnce(&mut Self, Reg<U32>),
    ) {
        let i = self.global_index_x();
        let in_bounds = self.setp_lt(i, n);
        self.if_then(in_bounds, |k| body(k, i));
    }

    /// `for (i = start; i < end; i += step) body(i)` over u32 (unsigned compare).
    ///
    /// When `start`, `end` and `step` are the same in every thread of the block, every thread
    /// runs the same iterations, so the body may contain barriers.
    pub fn for_range(
        &mut self,
        start: impl Into<Val<U32>>,
        end: impl Into<Val<U32>>,
        step: impl Into<Val<U32>>,
        body: impl FnOnce(&mut Self, Reg<U32>),
    ) {
        let i = self.var::<U32>(start);
        let end = end.into();
        let step = step.into();
        let head = self.label("loop");
        let exit = self.label("loop_end");
        self.place(head);
        let done = self.setp_ge(i, end);
        self.bra_if(done, false, exit);
        body(self, i);
        self.add_into(i, i, step);
        self.bra(head);
        self.place(exit);
    }

    /// `while cond() { body() }`.
    pub fn while_loop(
        &mut self,
        cond: impl FnOnce(&mut Self) -> Pred,
        body: impl FnOnce(&mut Self),
    ) {
        let head = self.label("while");
        let exit = self.label("while_end");
        self.place(head);
        let c = cond(self);
        self.bra_if(c, true, exit);
        body(self);
        self.bra(head);
        self.place(exit);
    }
}
