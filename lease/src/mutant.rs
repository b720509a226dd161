//! Defects a review found, kept so that the simulation can show it finds
//! each one (feature `mutants`; without it every switch is off and the
//! checks compile away).
//!
//! Internal, not for users (feature `internals`): the switches below are
//! the engine's hooks; the simulation (`bucket-lease-sim`) names the
//! mutants and turns one on for a whole process with `select`.
//!
//! [`StoreMutant`]s are defects the simulation does not reach: below the
//! `Store` trait, or in time it does not model (`put_new` hashing its body
//! takes no simulated time): the stores' and the fenced writer's own tests
//! find them. The simulation's own store can break the trait's contract
//! the way one of them did (`Mutant::StoreSendsLate`), so that its check of
//! the contract is shown to work. One is chosen for a whole test process
//! by the variable `BUCKET_LEASE_MUTANT` (with the feature `mutants`;
//! `scripts/check-store-mutants.sh` runs each).

internal! {
/// A defect the lease once had, reintroduced on request. Some are switched
/// on only by the simulation's own code (its store, its `run`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(feature = "internals"), allow(dead_code))]
pub enum Mutant {
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
    /// A record or fenced object with our instance id counts as ours
    /// whatever process nonce it carries (issue 19): a second process
    /// started under the same id takes the live record at its epoch.
    SameNameIsOurs,
    /// A keeper pool reports a lease's `Fenced` only once a renewal thread
    /// takes its overdue job, not at its write deadline.
    PoolFencedWhenTaken,
    /// The simulation's store now and then holds a request past its
    /// deadline before sending it, then sends it with its whole timeout
    /// (as the HTTP store did behind a slow credentials refresh): it
    /// breaks the `Store` contract, which the simulation checks.
    StoreSendsLate,
    /// The probe takes a refused write on our own record's ETag for a
    /// write of ours that landed unseen, so a service that refuses every
    /// `If-Match` (a right one too) hands out a lease no renewal can keep.
    OwnEtagRefusalTrusted,
    /// A record counts as a lease's own when it names the lease's process
    /// (instance id and nonce), whatever acquire call claimed it (issue
    /// 28): an acquire takes a live record of another `Lease` value of its
    /// own process back at its epoch, and an old value's release or
    /// renewal changes a newer value's record.
    IdentityByProcess,
    /// A keeper pool with `renewal_threads(0)` renews every lease on its
    /// scheduler thread, whatever its store (issue 29): a store call that
    /// waits (a locked directory, a slow service) holds every other
    /// lease's renewals and its `Fenced`.
    PoolInlineEveryStore,
    /// The acquire's spaced probe (a store with a write interval) sends
    /// our record last in its second round (issue 30): on a store whose
    /// writes go one after another, the record leaves with a stamp taken
    /// before the other writes, however long they took, and is stale
    /// earlier than its holder's fence assumes.
    SpacedProbeRecordLast,
    /// The keeper driver renews once more after a wait said stop (issue
    /// 41): a stopped keeper sends a renewal before its release.
    DriverRenewsAfterStop,
    /// The keeper driver bounds a renewal a renewal interval past the write
    /// deadline (issue 41): a hung renewal runs past the fence, and the
    /// keeper reports `Fenced` that much late.
    DriverRenewsPastDeadline,
    /// The keeper driver bounds a warm-up by the write deadline, not by its
    /// renewal's due instant (issue 41): a slow warm-up holds the renewal
    /// past its due instant.
    DriverWarmsPastDue,
    /// The pool driver hands out one more renewal of a lease as it is
    /// removed (issue 41): a removed lease is renewed beside its release.
    DriverPoolRenewsAfterRemove,
    /// The pool driver holds a `Fenced` event back until its next wake-up
    /// (issue 41): the fence is reported after the write deadline.
    DriverPoolFencesLate,
}
}

#[cfg(feature = "mutants")]
static ACTIVE: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(usize::MAX);

/// Turn `mutant` on for the whole process (`None`: the real code).
#[cfg(feature = "mutants")]
pub fn select(mutant: Option<Mutant>) {
    let index = mutant.map_or(usize::MAX, |m| m as usize);
    ACTIVE.store(index, std::sync::atomic::Ordering::SeqCst);
}

internal! {
/// Whether `mutant` is on.
#[cfg(feature = "mutants")]
pub fn on(mutant: Mutant) -> bool {
    ACTIVE.load(std::sync::atomic::Ordering::Relaxed) == mutant as usize
}
}

internal! {
/// Whether `mutant` is on: never, without the feature `mutants`.
#[cfg(not(feature = "mutants"))]
#[inline(always)]
pub fn on(_mutant: Mutant) -> bool {
    false
}
}

/// A defect a store once had, below the `Store` trait, one the
/// simulation cannot see for want of time spent (`put_new`'s hashing), or
/// a rule of a held set's balance, which the simulation does not draw,
/// reintroduced for a test process that names it in `BUCKET_LEASE_MUTANT`
/// (feature `mutants`). Public only so the backends crate can ask; not
/// part of the API.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreMutant {
    /// The HTTP store computes a request's timeout before it waits for
    /// credentials, so a slow source lets the request leave after the
    /// deadline with the whole timeout.
    TimeoutBeforeCredentials,
    /// A `credential_process`'s output is read to its end with no bound, so
    /// a child it left holding the pipe holds the caller.
    UnboundedProcessOutput,
    /// A caller with no valid credentials waits for another thread's
    /// refresh with no bound of its own.
    UnboundedRefreshWait,
    /// The HTTP store sends a profile's conditional deletes without first
    /// checking that the service honours them.
    DeleteConditionsTrusted,
    /// The HTTP store's switch of ETag spelling compares only the spelling,
    /// not whether it settled (issue 28): a question one thread opened
    /// while the spelling was open switches it after another thread's
    /// write on a right ETag settled it.
    SettledSpellingSwitched,
    /// The HTTP store keeps its check of conditional deletes across a
    /// change of ETag spelling (issue 28): a verdict found in quotes is
    /// taken for bare ETags too.
    DeleteVerdictOutlivesSpelling,
    /// The directory store writes its temporary file to the end with no
    /// check of the deadline between chunks, so a large body is written
    /// (and synced) long after the deadline.
    DirChunksUnchecked,
    /// The directory store's lock loop, after its last sleep, tries the
    /// lock once more without checking the deadline, so a lock let go
    /// after the deadline is taken.
    DirLockLastTryUnchecked,
    /// The directory store renames a written temporary file over its
    /// object with no check of the deadline after taking the lock, so a
    /// write paused past its deadline publishes.
    DirRenameUnchecked,
    /// The directory store removes an object with no check of the deadline
    /// after taking the lock, so a delete paused past its deadline removes.
    DirRemoveUnchecked,
    /// The directory store opens the folders on a key's path as paths are
    /// opened, following links (issue 39): a link planted in the bucket
    /// takes a write, a read or a delete out of it.
    DirFolderLinksFollowed,
    /// The directory store opens an object file at its name following a
    /// link there (issue 39): a read through a link answers another
    /// bucket's object, one file two objects.
    DirFileLinksFollowed,
    /// `FencedWriter::put_new` takes the write deadline before it hashes
    /// the body, so the hashing (seconds for a large body) is spent from
    /// the deadline, and the request leaves with its deadline passed.
    PutNewHashesAfterDeadline,
    /// A turn of a key's writes taken for a write that panicked is never
    /// settled (issue 30): every later write of the key waits for ever, or
    /// fails not sent.
    TurnUnsettledOnPanic,
    /// A write whose wait for its key's turn ends at or past its deadline
    /// (a clock that woke late) takes the turn all the same (issue 41's
    /// review): a completion goes to a store that does not check the
    /// deadline itself, and is published after the lease's write deadline.
    TurnTakenAfterDeadline,
    /// The acquire's spaced probe writes our record again with the
    /// acquire's stamp and leaves the fence dated from the acquire (issue
    /// 30): the key's next turn is the fence itself at the shortest TTL the
    /// store takes, and no renewal lands.
    SpacedProbeKeepsAcquireStamp,
    /// A fenced upload's completion is sent without `If-None-Match: *`
    /// (issue 31): a stale holder's upload replaces whatever object is at
    /// its key.
    UploadCompletesUnconditionally,
    /// A completion without an answer is settled as ours by the holder,
    /// nonce and epoch alone (issue 31): another stream of this process
    /// at the key is taken for this one.
    UploadSettledWithoutMark,
    /// A fenced upload's completion goes with the deadline its last part
    /// took (issue 31), so a fence that falls while the part is sent does
    /// not stop the completion.
    CompletionReusesPartDeadline,
    /// A fenced upload dropped unfinished is left open (issue 31): its
    /// parts stay, billed, until a lifecycle rule removes them.
    UploadLeftOpenOnDrop,
    /// A held set takes every free prefix, whatever its fair share (issue
    /// 42): the first worker keeps the whole set, and a joiner idles.
    SetTakesAboveShare,
    /// A held set above its share forgets its excess without releasing it
    /// (issue 42): the pool still renews those leases, so no joiner can
    /// take them, and the set no longer lists what it holds.
    SetGivesUpWithoutRelease,
    /// A held set above its share releases its excess at once, with its
    /// writes in flight (issue 42): the taker writes while a write of ours
    /// started before the release may still land.
    SetReleasesBeforeWritesEnd,
}

impl StoreMutant {
    /// Every store mutant, in the order the check script runs them.
    pub const ALL: [StoreMutant; 23] = [
        StoreMutant::TimeoutBeforeCredentials,
        StoreMutant::UnboundedProcessOutput,
        StoreMutant::UnboundedRefreshWait,
        StoreMutant::DeleteConditionsTrusted,
        StoreMutant::SettledSpellingSwitched,
        StoreMutant::DeleteVerdictOutlivesSpelling,
        StoreMutant::DirChunksUnchecked,
        StoreMutant::DirLockLastTryUnchecked,
        StoreMutant::DirRenameUnchecked,
        StoreMutant::DirRemoveUnchecked,
        StoreMutant::DirFolderLinksFollowed,
        StoreMutant::DirFileLinksFollowed,
        StoreMutant::PutNewHashesAfterDeadline,
        StoreMutant::TurnUnsettledOnPanic,
        StoreMutant::TurnTakenAfterDeadline,
        StoreMutant::SpacedProbeKeepsAcquireStamp,
        StoreMutant::UploadCompletesUnconditionally,
        StoreMutant::UploadSettledWithoutMark,
        StoreMutant::CompletionReusesPartDeadline,
        StoreMutant::UploadLeftOpenOnDrop,
        StoreMutant::SetTakesAboveShare,
        StoreMutant::SetGivesUpWithoutRelease,
        StoreMutant::SetReleasesBeforeWritesEnd,
    ];

    /// The mutant's name in `BUCKET_LEASE_MUTANT`.
    pub fn name(self) -> &'static str {
        match self {
            StoreMutant::TimeoutBeforeCredentials => "timeout-before-credentials",
            StoreMutant::UnboundedProcessOutput => "unbounded-process-output",
            StoreMutant::UnboundedRefreshWait => "unbounded-refresh-wait",
            StoreMutant::DeleteConditionsTrusted => "delete-conditions-trusted",
            StoreMutant::SettledSpellingSwitched => "settled-spelling-switched",
            StoreMutant::DeleteVerdictOutlivesSpelling => "delete-verdict-outlives-spelling",
            StoreMutant::DirChunksUnchecked => "dir-chunks-unchecked",
            StoreMutant::DirLockLastTryUnchecked => "dir-lock-last-try-unchecked",
            StoreMutant::DirRenameUnchecked => "dir-rename-unchecked",
            StoreMutant::DirRemoveUnchecked => "dir-remove-unchecked",
            StoreMutant::DirFolderLinksFollowed => "dir-folder-links-followed",
            StoreMutant::DirFileLinksFollowed => "dir-file-links-followed",
            StoreMutant::PutNewHashesAfterDeadline => "put-new-hashes-after-deadline",
            StoreMutant::TurnUnsettledOnPanic => "turn-unsettled-on-panic",
            StoreMutant::TurnTakenAfterDeadline => "turn-taken-after-deadline",
            StoreMutant::SpacedProbeKeepsAcquireStamp => "spaced-probe-keeps-acquire-stamp",
            StoreMutant::UploadCompletesUnconditionally => "upload-completes-unconditionally",
            StoreMutant::UploadSettledWithoutMark => "upload-settled-without-mark",
            StoreMutant::CompletionReusesPartDeadline => "completion-reuses-part-deadline",
            StoreMutant::UploadLeftOpenOnDrop => "upload-left-open-on-drop",
            StoreMutant::SetTakesAboveShare => "set-takes-above-share",
            StoreMutant::SetGivesUpWithoutRelease => "set-gives-up-without-release",
            StoreMutant::SetReleasesBeforeWritesEnd => "set-releases-before-writes-end",
        }
    }

    /// Whether this mutant is on: the process was started with
    /// `BUCKET_LEASE_MUTANT` naming it (read once).
    #[cfg(feature = "mutants")]
    pub fn on(self) -> bool {
        static CHOSEN: std::sync::OnceLock<Option<StoreMutant>> = std::sync::OnceLock::new();
        let chosen = CHOSEN.get_or_init(|| {
            let name = std::env::var("BUCKET_LEASE_MUTANT").ok()?;
            StoreMutant::ALL.into_iter().find(|m| m.name() == name)
        });
        *chosen == Some(self)
    }

    /// Whether this mutant is on: never, without the feature `mutants`.
    #[cfg(not(feature = "mutants"))]
    #[inline(always)]
    pub fn on(self) -> bool {
        false
    }
}
