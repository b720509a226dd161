//! Defects a review found, kept so that the simulation can show it finds
//! each one (feature `mutants`; without it every switch is off and the
//! checks compile away).
//!
//! One process runs at most one mutant, chosen at run time by
//! [`crate::sim`] from its name.

/// A defect the lease once had, reintroduced on request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutant {
    /// After a renewal fails at the deadline the schedule waits for ever
    /// instead of ending with `Fenced` (and `run` heeds only the events).
    KeeperNeverFences,
    /// `run`'s plan sends SIGKILL at the full TTL, not before the deadline.
    KillAtFullTtl,
    /// Release sends `DELETE` with `If-Match` on the last ETag.
    ReleaseByDelete,
    /// A TTL above the sane maximum is accepted at acquire.
    TtlAboveMax,
    /// An answer without an ETag downgrades the lease to best-effort.
    MissingEtagDowngrade,
    /// The write deadline is the full TTL, not two thirds of it.
    FenceAtFullTtl,
    /// A suspect record is treated as fresh for ever: never taken over.
    SuspectWatchedForever,
    /// `put_pointer` overwrites the pointer unconditionally.
    PointerOverwrites,
    /// A keeper pool sends one renewal at a time, whatever its threads.
    PoolSerialRenewals,
    /// An acquire whose write met a transient failure writes the record
    /// again unconditionally instead of reading it first.
    TransientOverwrites,
}

impl Mutant {
    /// Every mutant, in the order `--mutants` lists them.
    #[cfg_attr(not(feature = "mutants"), allow(dead_code))]
    pub(crate) const ALL: [Mutant; 10] = [
        Mutant::KeeperNeverFences,
        Mutant::KillAtFullTtl,
        Mutant::ReleaseByDelete,
        Mutant::TtlAboveMax,
        Mutant::MissingEtagDowngrade,
        Mutant::FenceAtFullTtl,
        Mutant::SuspectWatchedForever,
        Mutant::PointerOverwrites,
        Mutant::PoolSerialRenewals,
        Mutant::TransientOverwrites,
    ];

    /// The mutant's name on the command line.
    #[cfg_attr(not(feature = "mutants"), allow(dead_code))]
    pub(crate) fn name(self) -> &'static str {
        match self {
            Mutant::KeeperNeverFences => "keeper-never-fences",
            Mutant::KillAtFullTtl => "kill-at-full-ttl",
            Mutant::ReleaseByDelete => "release-by-delete",
            Mutant::TtlAboveMax => "ttl-above-max",
            Mutant::MissingEtagDowngrade => "missing-etag-downgrade",
            Mutant::FenceAtFullTtl => "fence-at-full-ttl",
            Mutant::SuspectWatchedForever => "suspect-watched-forever",
            Mutant::PointerOverwrites => "pointer-overwrites",
            Mutant::PoolSerialRenewals => "pool-serial-renewals",
            Mutant::TransientOverwrites => "transient-overwrites",
        }
    }
}

#[cfg(feature = "mutants")]
static ACTIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Turn `mutant` on for the whole process (`None`: the real code).
#[cfg(feature = "mutants")]
pub(crate) fn select(mutant: Option<Mutant>) {
    let index = mutant
        .and_then(|m| Mutant::ALL.iter().position(|a| *a == m))
        .unwrap_or(usize::MAX);
    ACTIVE.store(index, std::sync::atomic::Ordering::SeqCst);
}

/// Whether `mutant` is on.
#[cfg(feature = "mutants")]
pub(crate) fn on(mutant: Mutant) -> bool {
    let index = ACTIVE.load(std::sync::atomic::Ordering::Relaxed);
    Mutant::ALL.get(index) == Some(&mutant)
}

/// Whether `mutant` is on: never, without the feature `mutants`.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub(crate) fn on(_mutant: Mutant) -> bool {
    false
}
