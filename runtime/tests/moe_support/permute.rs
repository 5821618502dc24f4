//! `moe_permute` alone against a host reference that also accepts indices naming no expert
//! (`≥ E`, e.g. from NaN logits): those pairs are dropped and counted nowhere.

use ptxforge_runtime::launch::{Backend, LaunchRecord, SimBackend};
use ptxforge_runtime::templates::moe::launch::MoeLaunch;
use ptxforge_runtime::templates::moe::MoeConfig;
use ptxforge_runtime::templates::testing::SplitMix64;
use ptxforge_runtime::templates::KernelFamily;

/// Routing indices for `tokens` tokens, skewed so the low experts overflow their bins (expert
/// `min(a, b)` of two uniform draws), with about one pair in 64 naming a non-expert (`E` or
/// `u32::MAX`).
pub fn skewed_indices(experts: u32, top_k: u32, tokens: u32, seed: u64) -> Vec<u32> {
    let mut rng = SplitMix64::new(seed);
    (0..tokens * top_k)
        .map(|_| match rng.below(64) {
            0 => experts,
            1 => u32::MAX,
            _ => {
                let a = rng.below(u64::from(experts));
                let b = rng.below(u64::from(experts));
                a.min(b) as u32
            }
        })
        .collect()
}

/// `moe_permute`'s outputs.
#[derive(Debug, PartialEq, Eq)]
pub struct Permuted {
    pub token_ids: Vec<u32>,
    pub counts: Vec<u32>,
    pub routed: Vec<u32>,
    pub slot_of: Vec<u32>,
}

/// Token-major slots: pair `p` routed to expert `e < E` gets slot `#{earlier pairs of e}`, kept
/// below `capacity`.
pub fn permute_reference(indices: &[u32], experts: u32, top_k: u32, capacity: u32) -> Permuted {
    let mut routed = vec![0u32; experts as usize];
    let mut token_ids = vec![u32::MAX; (experts * capacity) as usize];
    let mut slot_of = vec![u32::MAX; indices.len()];
    for (pair, &e) in indices.iter().enumerate() {
        if e < experts {
            let slot = routed[e as usize];
            routed[e as usize] += 1;
            if slot < capacity {
                token_ids[(e * capacity + slot) as usize] = pair as u32 / top_k;
                slot_of[pair] = slot;
            }
        }
    }
    let counts = routed.iter().map(|&r| r.min(capacity)).collect();
    Permuted {
        token_ids,
        counts,
        routed,
        slot_of,
    }
}

/// Runs `moe_permute` of `cfg` on `indices` (`tokens · K` of them) in the interpreter (every
/// check on), asserts its outputs equal [`permute_reference`] and returns its launch record.
pub fn permute_checked(cfg: &MoeConfig, tokens: u32, indices: &[u32]) -> LaunchRecord {
    let ptx = cfg.compile().expect("compiles").ptx;
    let dev = SimBackend::new();
    let launch = MoeLaunch::new(cfg, &dev, &ptx, tokens).expect("launch");
    let ws = launch.workspace::<f32>().expect("workspace");
    let indices_dev = dev.upload(indices).expect("upload");
    launch.permute(&indices_dev, ws.bins()).expect("permute");
    let expected = permute_reference(indices, cfg.experts, cfg.top_k, launch.shape().capacity);
    let got = Permuted {
        token_ids: dev.download(&ws.token_ids).expect("download"),
        counts: dev.download(&ws.counts).expect("download"),
        routed: dev.download(&ws.routed).expect("download"),
        slot_of: dev.download(&ws.slot_of).expect("download"),
    };
    assert_eq!(
        got, expected,
        "moe_permute E = {} K = {} T = {tokens}",
        cfg.experts, cfg.top_k
    );
    dev.take_launch_log()
        .into_iter()
        .find(|r| r.entry == "moe_permute")
        .expect("permute ran")
}
