//! A set's live workers, learned from the bucket alone, and each worker's
//! fair share of the set.
//!
//! Each worker of a set keeps a **membership lease**: a lease like any
//! other, on the lowest free slot `{members}/{n}` (`n` from 0), renewed by
//! the set's pool, fenced and expired as any lease is. So a worker that
//! stops releases its slot at once, and one that dies or pauses past its
//! fence is counted out when its slot's record expires, within a TTL, as
//! its shards' records do. A worker counts the live slots in a **census**,
//! every third of a TTL: it reads the slots from 0 up, one GET each, until
//! the first slot that was never taken (no object): slots are taken lowest
//! first and their records are never deleted (a release rewrites them), so
//! no slot above a never-taken one was ever taken, however many of those
//! below were given up since. Each record names its set (its payload), so
//! a worker of another set registered in the same folder is not counted.
//!
//! Why slots rather than a listing or the shard records: a census of
//! slots costs H + 1 GETs (H the most workers the set has had at once;
//! W + 1 while none has left) where reading the shard records
//! costs one per shard (1,000 for 1,000 shards), and it needs no LIST,
//! which the stores' trait does not have; each worker writes only its own
//! slot (a renewal every third of a TTL, as for a shard), so no key is
//! written faster than one write a second (R2's limit) and no two workers
//! contend for one key but to take a free slot. Per worker per TTL: 3
//! renewals of its slot and 3 censuses of H + 1 GETs.
//!
//! The **fair share** of the worker ranked `r` (0 for the lowest live
//! slot) among `W` live workers, for a set of `S` prefixes, is `S / W`,
//! one more for the first `S % W` ranks: the shares add up to `S` exactly,
//! so the workers end within one prefix of even, and a stable membership
//! gives stable shares (no churn). A worker holds at most its share: above
//! it, it gives up its excess by releasing it (the taker gets it at once,
//! with no overlap and no wait for a TTL); below it, it takes what is free.

use std::time::Instant;

use crate::pool::LeaseId;

/// Where a set's workers register when the set does not say: beside the
/// set's prefixes, under their longest common folder, in a folder named
/// after the set (`shards/.members-1a2b3c4d` for `shards/0`…`shards/99`),
/// so that two sets with other prefixes under one folder never count each
/// other's workers.
pub(crate) fn default_members_prefix(prefixes: &[String]) -> String {
    let folders: Vec<Vec<&str>> = prefixes
        .iter()
        .map(|p| {
            let mut parts: Vec<&str> = p.split('/').collect();
            parts.pop();
            parts
        })
        .collect();
    let common = folders.first().map_or(0, |first| {
        (0..first.len())
            .take_while(|&i| folders.iter().all(|f| f.get(i) == first.get(i)))
            .count()
    });
    let folder = folders
        .first()
        .map_or(String::new(), |f| f[..common].join("/"));
    let mut sorted = prefixes.to_vec();
    sorted.sort();
    let name = format!(".members-{:08x}", set_hash(&sorted));
    if folder.is_empty() {
        name
    } else {
        format!("{folder}/{name}")
    }
}

/// The set's name in its workers' membership records: `set ` and
/// [`set_hash`] of its prefixes, in hex.
pub(crate) fn set_name(prefixes: &[String]) -> String {
    let mut sorted = prefixes.to_vec();
    sorted.sort();
    format!("set {:08x}", set_hash(&sorted))
}

/// 32 bits of FNV-1a over the prefixes, each ended by a newline: a name
/// for the set that every worker given the same prefixes computes alike.
fn set_hash(prefixes: &[String]) -> u32 {
    let mut hash: u32 = 0x811c_9dc5;
    for byte in prefixes.iter().flat_map(|p| p.bytes().chain([b'\n'])) {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash
}

/// The share of the worker ranked `rank` among `live` workers, of
/// `prefixes` prefixes (all of them when it counts no worker).
pub(crate) fn fair_share(prefixes: usize, live: usize, rank: usize) -> usize {
    if live == 0 {
        return prefixes;
    }
    prefixes / live + usize::from(rank < prefixes % live)
}

/// This worker's membership, as the set's thread keeps it.
#[derive(Debug)]
pub(crate) struct Membership {
    /// Where the slots are (`{members}/{n}`).
    pub(crate) prefix: String,
    /// The set's name ([`set_name`]), the payload of its slots' records.
    pub(crate) set: String,
    /// The slot held and its lease's id in the pool, once registered.
    pub(crate) slot: Option<(usize, LeaseId)>,
    /// The live slots the last census found, ascending, this worker's own
    /// included once registered.
    pub(crate) live: Vec<usize>,
    /// The live workers and this one's share the last census counted,
    /// once one has.
    pub(crate) counted: Option<(usize, usize)>,
    /// When to register (take a slot) again, while not registered.
    pub(crate) next_register: Instant,
    /// When the next census is due.
    pub(crate) next_census: Instant,
    /// Failed registrations or censuses in a row.
    pub(crate) failures: u32,
}

impl Membership {
    /// Not registered, everything due at `now`.
    pub(crate) fn new(prefix: String, set: String, now: Instant) -> Self {
        Membership {
            prefix,
            set,
            slot: None,
            live: Vec::new(),
            counted: None,
            next_register: now,
            next_census: now,
            failures: 0,
        }
    }

    /// Slot `n`'s prefix.
    pub(crate) fn slot_prefix(&self, n: usize) -> String {
        format!("{}/{n}", self.prefix)
    }

    /// This worker's share of `prefixes` by the last census: by its rank
    /// among the live slots; counted as one more, ranked last, while it
    /// holds no slot (its registration failing).
    pub(crate) fn share(&self, prefixes: usize) -> usize {
        match self.slot {
            Some((own, _)) => {
                let rank = self.live.iter().filter(|&&n| n < own).count();
                let live = self.live.len().max(rank + 1);
                fair_share(prefixes, live, rank)
            }
            None => fair_share(prefixes, self.live.len() + 1, self.live.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_shares_add_up_to_the_set_and_differ_by_one_at_most() {
        for s in 0..40 {
            for w in 1..12 {
                let shares: Vec<usize> = (0..w).map(|r| fair_share(s, w, r)).collect();
                assert_eq!(shares.iter().sum::<usize>(), s, "{s} over {w}");
                let (min, max) = (shares.iter().min(), shares.iter().max());
                assert!(max.unwrap() - min.unwrap() <= 1, "{s} over {w}: {shares:?}");
            }
        }
        assert_eq!(
            fair_share(7, 0, 0),
            7,
            "a worker that counts none takes all"
        );
    }

    #[test]
    fn the_members_folder_is_the_common_folder_named_after_the_set() {
        let shards: Vec<String> = (0..100).map(|i| format!("shards/{i}")).collect();
        let members = default_members_prefix(&shards);
        assert!(members.starts_with("shards/.members-"), "{members}");
        let mut reversed = shards.clone();
        reversed.reverse();
        assert_eq!(default_members_prefix(&reversed), members, "any order");
        assert_ne!(
            default_members_prefix(&shards[..50]),
            members,
            "another set under the same folder counts its own workers"
        );
        let top = default_members_prefix(&names(&["a", "b"]));
        assert!(top.starts_with(".members-"), "{top}");
        let nested = default_members_prefix(&names(&["x/y/1", "x/z/2"]));
        assert!(nested.starts_with("x/.members-"), "{nested}");
        assert!(default_members_prefix(&[]).starts_with(".members-"));
    }

    #[test]
    fn a_share_is_by_rank_among_the_live_slots() {
        let now = Instant::now();
        let mut m = Membership::new("m".to_string(), "set 0".to_string(), now);
        assert_eq!(m.share(10), 10, "alone, before any census");
        m.live = vec![0, 3];
        assert_eq!(m.share(10), 3, "unregistered: a third, ranked last");
        m.slot = Some((3, LeaseId::from_index(0)));
        assert_eq!(m.share(10), 5, "ranked second of two");
        m.live = vec![0, 1, 3];
        assert_eq!(m.share(10), 3, "ranked third of three: 4, 3, 3");
        m.slot = Some((0, LeaseId::from_index(0)));
        assert_eq!(m.share(10), 4);
    }
}
