//! Stores for the unit tests of several modules: the memory store with
//! hooks around its reads.

use crate::memory::MemoryStore;
use crate::store::{DeleteMode, Object, PutOptions, Store, StoreError, Version};
use std::time::Instant;

/// A memory store whose reads pass `reads`, which may count, refuse or
/// hang them, on their way to it; writes and deletes go straight to it.
#[derive(Debug, Default)]
pub(crate) struct Wrapped<R> {
    pub(crate) inner: MemoryStore,
    pub(crate) reads: R,
}

/// What a [`Wrapped`] store does around the reads of the memory store:
/// by default, nothing.
pub(crate) trait Reads: Send + Sync + std::fmt::Debug {
    /// Before any read of `key`, plain or conditional: an error to answer
    /// instead.
    fn before_read(&self, _key: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// Before a plain read of `key` (after [`before_read`](Self::before_read)):
    /// an error to answer instead.
    fn before_plain_read(&self, _key: &str) -> Result<(), StoreError> {
        Ok(())
    }

    /// Before a conditional read of `key` bounded by `deadline`: an error
    /// to answer instead.
    fn before_conditional_read(
        &self,
        _key: &str,
        _deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        Ok(())
    }

    /// After a conditional read the memory store answered with `answer`.
    fn after_conditional_read(&self, _answer: &Option<Object>) {}
}

impl<R: Reads> Store for Wrapped<R> {
    fn get(&self, key: &str, deadline: Option<Instant>) -> Result<Object, StoreError> {
        self.reads.before_read(key)?;
        self.reads.before_plain_read(key)?;
        self.inner.get(key, deadline)
    }

    fn get_if_changed(
        &self,
        key: &str,
        known: &Version,
        deadline: Option<Instant>,
    ) -> Result<Option<Object>, StoreError> {
        self.reads.before_read(key)?;
        self.reads.before_conditional_read(key, deadline)?;
        let answer = self.inner.get_if_changed(key, known, deadline)?;
        self.reads.after_conditional_read(&answer);
        Ok(answer)
    }

    fn put(&self, key: &str, body: &[u8], options: &PutOptions) -> Result<Version, StoreError> {
        self.inner.put(key, body, options)
    }

    fn delete(
        &self,
        key: &str,
        mode: &DeleteMode,
        deadline: Option<Instant>,
    ) -> Result<(), StoreError> {
        self.inner.delete(key, mode, deadline)
    }
}
