//! Opening the redb file: creating a new store so that a crash leaves none or a whole
//! one, repairing an unclean one, and turning every kind of damage (including a panic
//! inside redb) into a [`StoreError`] that names the file.

use super::*;

/// Runs `f`, turning a panic inside redb (which damaged files provoke: a truncated file
/// fails an assertion while opening) into an error naming the file. The panic is not
/// printed: its message is in the error, which is what the operator reads.
pub(super) fn guard<T>(
    path: &Path,
    f: impl FnOnce() -> Result<T, StoreError>,
) -> Result<T, StoreError> {
    let caught = quiet_panics(|| panic::catch_unwind(AssertUnwindSafe(f)));
    caught.unwrap_or_else(|payload| {
        let message = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        Err(StoreError::Corrupt {
            path: path.display().to_string(),
            reason: format!("the file is damaged or truncated (redb: {message})"),
        })
    })
}

thread_local! {
    /// Set while this thread runs [`quiet_panics`]: its panics are caught and reported
    /// as errors, so the panic hook stays silent.
    static QUIET: Cell<bool> = const { Cell::new(false) };
}

/// Runs `f` with the panic hook silenced for this thread only. The hook is
/// process-wide, so it is replaced once by one that defers to the previous hook
/// unless the panicking thread is inside this function; panics of every other thread
/// (and of this one outside it) are printed as before.
pub(super) fn quiet_panics<R>(f: impl FnOnce() -> R) -> R {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let previous = panic::take_hook();
        panic::set_hook(Box::new(move |info| {
            if !QUIET.with(Cell::get) {
                previous(info);
            }
        }));
    });
    /// Restores the flag however `f` ends.
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            QUIET.with(|q| q.set(self.0));
        }
    }
    let _restore = Restore(QUIET.with(|q| q.replace(true)));
    f()
}

/// Initializes an empty store as `path`: built under a temporary name, made durable,
/// then renamed into place, so that a crash leaves either no store or a complete one.
pub(super) fn create_new(data_dir: &Path, path: &Path) -> Result<(), StoreError> {
    let new_path = data_dir.join(NEW_FILE_NAME);
    match fs::remove_file(&new_path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(open_error(&new_path, e)),
    }
    let db = guard(&new_path, || {
        builder(&new_path)
            .create(&new_path)
            .map_err(|e| database_error(&new_path, e))
    })?;
    initialize(&db).map_err(|e| open_error(&new_path, format!("cannot initialize: {e}")))?;
    drop(db);
    File::open(&new_path)
        .and_then(|f| f.sync_all())
        .map_err(|e| open_error(&new_path, e))?;
    fs::rename(&new_path, path).map_err(|e| open_error(path, format!("cannot rename: {e}")))?;
    File::open(data_dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| open_error(data_dir, format!("cannot sync data directory: {e}")))?;
    tracing::info!(path = %path.display(), "created an empty store");
    Ok(())
}

/// Creates the tables and the format marker in a new database.
pub(super) fn initialize(db: &Database) -> Result<(), String> {
    let mut txn = db.begin_write().map_err(|e| e.to_string())?;
    txn.set_durability(Durability::Immediate);
    {
        let mut info = txn.open_table(INFO).map_err(|e| e.to_string())?;
        info.insert(FORMAT_KEY, [FORMAT_VERSION].as_slice())
            .map_err(|e| e.to_string())?;
        for table in [OFFSETS, GROUPS, GROUP_META] {
            txn.open_table(table).map_err(|e| e.to_string())?;
        }
    }
    txn.commit().map_err(|e| e.to_string())
}

/// Opens the existing database at `path`, repairing it if it was not closed cleanly.
pub(super) fn open_existing(path: &Path) -> Result<Database, StoreError> {
    guard(path, || {
        builder(path)
            .open(path)
            .map_err(|e| database_error(path, e))
    })
}

pub(super) fn builder(path: &Path) -> Builder {
    let shown = path.display().to_string();
    let mut builder = Builder::new();
    builder.set_cache_size(CACHE_BYTES);
    builder.set_repair_callback(move |session: &mut RepairSession| {
        if session.progress() == 0.0 {
            tracing::warn!(path = %shown, "store was not closed cleanly; repairing it");
        }
    });
    builder
}

/// Maps an error from opening a database file.
pub(super) fn database_error(path: &Path, error: DatabaseError) -> StoreError {
    match error {
        DatabaseError::DatabaseAlreadyOpen => open_error(
            path,
            "it is already open, probably by another rollcall process using the same data directory",
        ),
        DatabaseError::UpgradeRequired(version) => open_error(
            path,
            format!("its redb file format {version} needs an upgrade"),
        ),
        DatabaseError::Storage(StorageError::Corrupted(reason)) => StoreError::Corrupt {
            path: path.display().to_string(),
            reason,
        },
        DatabaseError::Storage(StorageError::Io(e)) if e.kind() == io::ErrorKind::InvalidData => {
            open_error(
                path,
                "not a redb database, or its header is damaged (no valid redb header)",
            )
        }
        DatabaseError::Storage(StorageError::Io(e))
            if e.kind() == io::ErrorKind::UnexpectedEof =>
        {
            StoreError::Corrupt {
                path: path.display().to_string(),
                reason: format!("the file is truncated: {e}"),
            }
        }
        other => open_error(path, other),
    }
}

pub(super) fn open_error(path: &Path, reason: impl fmt::Display) -> StoreError {
    StoreError::Open {
        path: path.display().to_string(),
        reason: reason.to_string(),
    }
}
