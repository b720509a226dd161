//! The mutant catalogue: each defect the engine can reintroduce
//! ([`Mutant`], the core's hooks), under the name the command line and the
//! replay commands give it, in the order `--mutants` lists them.

use bucket_lease_core::mutant::Mutant;

/// Every mutant and its name.
pub(crate) const ALL: [(Mutant, &str); 22] = [
    (Mutant::KeeperNeverFences, "keeper-never-fences"),
    (Mutant::KillAtFullTtl, "kill-at-full-ttl"),
    (Mutant::ReleaseByDelete, "release-by-delete"),
    (Mutant::TtlAboveMax, "ttl-above-max"),
    (Mutant::MissingEtagDowngrade, "missing-etag-downgrade"),
    (Mutant::FenceAtFullTtl, "fence-at-full-ttl"),
    (Mutant::SuspectWatchedForever, "suspect-watched-forever"),
    (Mutant::PointerOverwrites, "pointer-overwrites"),
    (Mutant::PoolSerialRenewals, "pool-serial-renewals"),
    (Mutant::TransientOverwrites, "transient-overwrites"),
    (Mutant::SameNameIsOurs, "same-name-is-ours"),
    (Mutant::PoolFencedWhenTaken, "pool-fenced-when-taken"),
    (Mutant::StoreSendsLate, "store-sends-late"),
    (Mutant::OwnEtagRefusalTrusted, "own-etag-refusal-trusted"),
    (Mutant::IdentityByProcess, "identity-by-process"),
    (Mutant::PoolInlineEveryStore, "pool-inline-every-store"),
    (Mutant::SpacedProbeRecordLast, "spaced-probe-record-last"),
    (Mutant::DriverRenewsAfterStop, "driver-renews-after-stop"),
    (
        Mutant::DriverRenewsPastDeadline,
        "driver-renews-past-deadline",
    ),
    (Mutant::DriverWarmsPastDue, "driver-warms-past-due"),
    (
        Mutant::DriverPoolRenewsAfterRemove,
        "driver-pool-renews-after-remove",
    ),
    (Mutant::DriverPoolFencesLate, "driver-pool-fences-late"),
];

/// The mutant called `name`.
pub(crate) fn named(name: &str) -> Option<Mutant> {
    ALL.iter().find(|(_, n)| *n == name).map(|(m, _)| *m)
}
