//! The extended attribute `user.bucket-lease`, where the directory store
//! keeps what S3 keeps beside an object's bytes: its ETag and metadata (see
//! the parent module's Layout section for why there). Read and written
//! through an open file, so the attribute and the bytes a reader gets are
//! always those of one file.

use std::fs::File;
use std::io;

/// The attribute's name: in the `user.` namespace, which any file's owner
/// may write.
pub(super) const NAME: &str = "user.bucket-lease";

/// The buffer a read tries first: room for any attribute this store
/// writes but one with unusually long metadata, which is read again at its
/// size.
const FIRST_TRY: usize = 4096;

/// The attribute of `file`, or `None` when the file has none.
pub(super) fn get(file: &File) -> io::Result<Option<Vec<u8>>> {
    imp::get(file)
}

/// Set the attribute of `file` to `value`, replacing any it had.
pub(super) fn set(file: &File, value: &[u8]) -> io::Result<()> {
    imp::set(file, value)
}

/// Whether `error` says the file system (or the platform) keeps no user
/// extended attributes.
pub(super) fn is_unsupported(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::Unsupported || imp::is_unsupported(error)
}

#[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
mod imp {
    use super::{FIRST_TRY, NAME};
    use rustix::fs::{fgetxattr, fgetxattr_query, fsetxattr, XattrFlags};
    use rustix::io::Errno;
    use std::fs::File;
    use std::io;

    /// The answer for a file without the attribute.
    #[cfg(not(target_vendor = "apple"))]
    const ABSENT: Errno = Errno::NODATA;
    #[cfg(target_vendor = "apple")]
    const ABSENT: Errno = Errno::NOATTR;

    pub(super) fn get(file: &File) -> io::Result<Option<Vec<u8>>> {
        let mut size = FIRST_TRY;
        loop {
            let mut value = vec![0u8; size];
            match fgetxattr(file, NAME, &mut value[..]) {
                Ok(length) => {
                    value.truncate(length);
                    return Ok(Some(value));
                }
                Err(errno) if errno == ABSENT => return Ok(None),
                // Longer than the buffer: read again at its size (it may
                // have grown meanwhile, so round again).
                Err(Errno::RANGE) => match fgetxattr_query(file, NAME) {
                    Ok(length) => size = length.max(size + 1),
                    Err(errno) if errno == ABSENT => return Ok(None),
                    Err(errno) => return Err(errno.into()),
                },
                Err(errno) => return Err(errno.into()),
            }
        }
    }

    pub(super) fn set(file: &File, value: &[u8]) -> io::Result<()> {
        fsetxattr(file, NAME, value, XattrFlags::empty()).map_err(Into::into)
    }

    pub(super) fn is_unsupported(error: &io::Error) -> bool {
        let errno = error.raw_os_error().map(Errno::from_raw_os_error);
        errno == Some(Errno::NOTSUP) || errno == Some(Errno::OPNOTSUPP)
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
mod imp {
    use std::fs::File;
    use std::io;

    fn unsupported() -> io::Error {
        io::Error::new(
            io::ErrorKind::Unsupported,
            "this platform has no extended attributes the directory store can use",
        )
    }

    pub(super) fn get(_file: &File) -> io::Result<Option<Vec<u8>>> {
        Err(unsupported())
    }

    pub(super) fn set(_file: &File, _value: &[u8]) -> io::Result<()> {
        Err(unsupported())
    }

    pub(super) fn is_unsupported(_error: &io::Error) -> bool {
        false
    }
}
