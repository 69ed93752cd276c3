//! The database file under a disk store: opened owner-only, shared by the writer and
//! readers, and reopened after an I/O error. The delivery log keeps a file of its own
//! through the same type.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use redb::Database;

use super::backend;
use crate::store::StoreError;

/// An open database file, shared by its writer and readers. Empty while the writer
/// reopens it after an I/O error (redb refuses every later write on a handle that saw
/// one, until it is closed and opened again). The store has one; the delivery log has
/// its own (`store/log/disk.rs`), so that a failed log write never touches the store's.
#[derive(Debug)]
pub(crate) struct DbFile {
    db: std::sync::RwLock<Option<Arc<Database>>>,
    path: PathBuf,
    /// redb's page cache for this file.
    cache: usize,
}

impl DbFile {
    /// Opens (or creates) the file at `path`, its owner's only (it holds bodies and
    /// headers).
    pub(crate) fn open(path: &Path, cache: usize) -> anyhow::Result<Self> {
        let db = open_file(path, cache)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        crate::files::owner_only(path)
            .map_err(|e| anyhow::anyhow!("cannot restrict {} to its owner: {e}", path.display()))?;
        Ok(Self {
            db: std::sync::RwLock::new(Some(Arc::new(db))),
            path: path.to_path_buf(),
            cache,
        })
    }

    pub(crate) fn get(&self) -> Result<Arc<Database>, StoreError> {
        self.db
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
            .ok_or_else(|| {
                StoreError::Refused(format!("{} is being reopened", self.path.display()))
            })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Closes the handle and opens the file again (redb checks and repairs it). Waits
    /// for readers to let go of the old handle: the file admits one opener.
    pub(crate) fn reopen(&self) -> Result<(), StoreError> {
        let old = self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let Some(mut old) = old {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        drop(db);
                        break;
                    }
                    Err(still_shared) if Instant::now() < deadline => {
                        old = still_shared;
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    Err(still_shared) => {
                        *self
                            .db
                            .write()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(still_shared);
                        return Err(StoreError::Backend(
                            "the old handle of the file is still in use".into(),
                        ));
                    }
                }
            }
        }
        let db = open_file(&self.path, self.cache)
            .map_err(|e| backend(format!("reopening the file: {e}")))?;
        *self
            .db
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(Arc::new(db));
        Ok(())
    }

    /// The free space of the file's filesystem (`None` where it cannot be read).
    pub(crate) fn free_space(&self) -> Option<u64> {
        let dir = self
            .path
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        crate::files::free_space(dir)
    }
}

pub(super) fn open_file(path: &Path, cache: usize) -> Result<Database, redb::DatabaseError> {
    Database::builder().set_cache_size(cache).create(path)
}
