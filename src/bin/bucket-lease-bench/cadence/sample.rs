//! One renewal of `bench --interval`'s open loop, as it was met: when it
//! was due, what it cost from that instant, what the service answered, on
//! which connection, and how much of its self-fence budget it left.
//!
//! A sample is plain data: the driver (`cadence/mod.rs`) fills it, the
//! report (`cadence/report.rs`) summarises, exports and plots samples, and
//! reads them back from an earlier run's `--json` for `--compare`.

/// What the service answered the last request of a renewal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// An HTTP status: 200 for a renewal that landed, 412 or 409 for a
    /// refused one, 429 or a 5xx for a throttled or failed one.
    Status(u16),
    /// No answer before the renewal's deadline (the write deadline).
    Timeout,
    /// Nothing was sent: the connection, its TLS handshake or the host name
    /// lookup failed first, or the write deadline had already passed.
    NotSent,
    /// It failed in a way with no status (a connection cut mid-answer, a
    /// store without HTTP).
    Failed,
}

impl Answer {
    /// Its name in the exports and the table: `200`, `412`, `timeout`,
    /// `not-sent`, `failed`.
    pub fn label(self) -> String {
        match self {
            Answer::Status(code) => code.to_string(),
            Answer::Timeout => "timeout".into(),
            Answer::NotSent => "not-sent".into(),
            Answer::Failed => "failed".into(),
        }
    }

    /// The inverse of [`label`](Self::label).
    pub fn parse(label: &str) -> Option<Answer> {
        match label {
            "timeout" => Some(Answer::Timeout),
            "not-sent" => Some(Answer::NotSent),
            "failed" => Some(Answer::Failed),
            code => code.parse().ok().map(Answer::Status),
        }
    }
}

/// The connection the renewal's first request went out on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Connection {
    /// A connection kept from an earlier request.
    Kept,
    /// A connection opened for this request: the TCP connect took
    /// `connect_ms`, and the TLS handshake `tls_ms` (`None` over plain
    /// HTTP).
    New {
        /// Milliseconds from the first SYN to the connection being open.
        connect_ms: f64,
        /// Milliseconds of the TLS handshake, when there was one.
        tls_ms: Option<f64>,
    },
    /// The store does not say (a local directory, the memory store), or no
    /// request was sent.
    Unknown,
}

impl Connection {
    /// Its name in the exports: `kept`, `new` or `unknown`.
    pub fn label(self) -> &'static str {
        match self {
            Connection::Kept => "kept",
            Connection::New { .. } => "new",
            Connection::Unknown => "unknown",
        }
    }
}

/// What the service's `Date` header says of our wall clock: the service's
/// clock minus ours lies between `low_ms` and `high_ms`. `Date` has whole
/// seconds, so one answer bounds the offset to an interval of about one
/// second plus the request's time; the report intersects them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OffsetBounds {
    /// `Date` minus our wall clock when the answer arrived.
    pub low_ms: f64,
    /// `Date` plus one second minus our wall clock when the request left.
    pub high_ms: f64,
}

/// One scheduled renewal of one lease.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Which lease (0 to `--leases` − 1).
    pub lease: u32,
    /// Which renewal of that lease (0, 1, …), due at `scheduled_s`.
    pub seq: u64,
    /// When it was due, in seconds from the start of the run: the open
    /// loop's instant, `seq × interval` (plus the lease's stagger), whether
    /// or not the renewal before it had finished.
    pub scheduled_s: f64,
    /// Milliseconds from `scheduled_s` to the answer of the request that
    /// renewed the lease, retries and waits included (wrk2's correction
    /// for coordinated omission); `None` when it never landed.
    pub latency_ms: Option<f64>,
    /// Milliseconds from `scheduled_s` until its first request began (the
    /// driver's own lateness: a renewal before it still running, a late
    /// wake-up).
    pub start_ms: f64,
    /// What the last request of the renewal was answered.
    pub answer: Answer,
    /// How many requests it sent (retries in the HTTP client and the
    /// renewal's own retries): 1 when the first one landed.
    pub requests: u32,
    /// The connection of its first request.
    pub connection: Connection,
    /// Milliseconds from `scheduled_s` to the lease's write deadline as it
    /// stood then: the most the renewal could take and still land before
    /// its holder fences itself.
    pub budget_ms: f64,
    /// What the answers' `Date` headers said of the clocks, when any had
    /// one.
    pub offset: Option<OffsetBounds>,
}

impl Sample {
    /// Milliseconds of the budget left when the renewal landed
    /// (`budget_ms − latency_ms`); `None` when it never landed.
    pub fn headroom_ms(&self) -> Option<f64> {
        self.latency_ms.map(|l| self.budget_ms - l)
    }

    /// Whether the holder would have fenced itself: the renewal never
    /// landed, or landed after the write deadline.
    pub fn fenced(&self) -> bool {
        self.headroom_ms().is_none_or(|h| h <= 0.0)
    }

    /// How many requests beyond the first it took.
    pub fn retries(&self) -> u32 {
        self.requests.saturating_sub(1)
    }
}
