//! The strings a [`Lease`](crate::Lease) keeps for its whole life, in one
//! allocation.
//!
//! A lease names its key, its instance id and its acquire's stamp in every
//! record it writes, and never changes them. A pool keeps thousands of
//! leases, so the three share one allocation rather than three (issue 40:
//! at most 1 KiB per pooled lease). What it promises: each reads back
//! exactly as it was given.

/// A lease's key, instance id and acquire stamp, one after another in one
/// boxed string.
#[derive(Debug)]
pub(super) struct Names {
    text: Box<str>,
    /// Where the key ends and the instance id begins…
    key_end: usize,
    /// …and where the instance id ends and the stamp begins.
    id_end: usize,
}

impl Names {
    /// The three strings, copied into one allocation.
    pub(super) fn new(key: &str, instance_id: &str, acquired_at: &str) -> Names {
        let mut text = String::with_capacity(key.len() + instance_id.len() + acquired_at.len());
        text.push_str(key);
        text.push_str(instance_id);
        text.push_str(acquired_at);
        Names {
            text: text.into_boxed_str(),
            key_end: key.len(),
            id_end: key.len() + instance_id.len(),
        }
    }

    /// The lease object's key.
    pub(super) fn key(&self) -> &str {
        &self.text[..self.key_end]
    }

    /// The instance id the lease's records name.
    pub(super) fn instance_id(&self) -> &str {
        &self.text[self.key_end..self.id_end]
    }

    /// When the lease was taken, as its records say.
    pub(super) fn acquired_at(&self) -> &str {
        &self.text[self.id_end..]
    }
}

#[cfg(test)]
mod tests {
    use super::Names;

    #[test]
    fn each_name_reads_back_as_given() {
        for (key, id, stamp) in [
            (
                "nightly/LEASE",
                "0123456789abcdef0123456789abcdef",
                "2026-12-07T16:00:00Z",
            ),
            ("", "", ""),
            ("k/LEASE", "", "s"),
            ("é/LEASE", "ïd", "ß"),
        ] {
            let names = Names::new(key, id, stamp);
            assert_eq!(
                (names.key(), names.instance_id(), names.acquired_at()),
                (key, id, stamp)
            );
        }
    }
}
