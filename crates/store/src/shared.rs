//! [`SharedStore`]: the one [`Store`] of a process, opened on first use and shared by clones.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use crate::{Store, StoreError};

/// The database of a state root, opened the first time a caller needs it (a process that never
/// touches the agenda or a checkpoint never creates the file) and then shared: every clone
/// gets the same [`Store`]. An open that fails (locked, corrupted) is tried again on the next
/// call, so a fault at one moment is not kept for the life of the process.
#[derive(Clone)]
pub struct SharedStore {
    home: PathBuf,
    slot: Arc<Mutex<Option<Store>>>,
}

impl std::fmt::Debug for SharedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedStore")
            .field("home", &self.home)
            .finish_non_exhaustive()
    }
}

impl SharedStore {
    /// The database of the state root `home`, not opened yet.
    pub fn new(home: &Path) -> SharedStore {
        SharedStore {
            home: home.to_path_buf(),
            slot: Arc::new(Mutex::new(None)),
        }
    }

    /// The state root.
    pub fn home(&self) -> &Path {
        &self.home
    }

    /// The open database, opening it now if no call has yet.
    pub fn get(&self) -> Result<Store, StoreError> {
        let mut slot = self.slot.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(store) = slot.as_ref() {
            return Ok(store.clone());
        }
        let store = Store::open(&self.home)?;
        *slot = Some(store.clone());
        Ok(store)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opened_once_on_first_use_and_shared_by_clones() {
        let dir = tempfile::tempdir().unwrap();
        let shared = SharedStore::new(dir.path());
        assert!(!dir.path().join(crate::DB_FILE).exists(), "not before use");
        let copy = shared.clone();
        let a = shared.get().unwrap();
        let b = copy.get().unwrap();
        assert!(Arc::ptr_eq(&a.inner, &b.inner));
        assert!(dir.path().join(crate::DB_FILE).exists());
    }

    #[test]
    fn a_failed_open_is_tried_again() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join(crate::DB_FILE);
        std::os::unix::fs::symlink("/nowhere", &db).unwrap();
        let shared = SharedStore::new(dir.path());
        assert!(matches!(shared.get(), Err(StoreError::NotAFile { .. })));
        std::fs::remove_file(&db).unwrap();
        shared.get().unwrap();
    }
}
