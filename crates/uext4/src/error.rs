//! The crate's error type.
//!
//! Every failure that image contents, a path or an offset can cause is a
//! variant here, never a panic. Each variant maps to the errno a user of the
//! filesystem would expect (used by the FUSE front end and the CLI).
//!
//! Corruption is typed rather than a message: a [`Corruption`] names the
//! damaged [`Structure`], its [`Location`] and what is wrong
//! ([`CorruptKind`]), so callers (the FUSE adapter's `errors=` handling,
//! the write path's fallbacks, tests) match on it and the message is
//! derived from it.

use std::io;

/// Which on-disk structure a corruption or checksum error was found in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Structure {
    /// The primary superblock.
    Superblock,
    /// A block group descriptor.
    GroupDesc,
    /// A block or inode bitmap.
    Bitmap,
    /// An inode in an inode table.
    Inode,
    /// An extent tree node (header, index or leaf).
    Extent,
    /// An indirect block of a non-extent file.
    IndirectBlock,
    /// A directory leaf block or entry.
    DirEntry,
    /// An htree (dx) root or interior node.
    DxNode,
    /// An extended attribute block or in-inode attribute area.
    Xattr,
    /// A symlink target.
    Symlink,
    /// The jbd2 journal.
    Journal,
    /// The multiple-mount protection block.
    Mmp,
}

impl std::fmt::Display for Structure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = match self {
            Structure::Superblock => "superblock",
            Structure::GroupDesc => "group descriptor",
            Structure::Bitmap => "bitmap",
            Structure::Inode => "inode",
            Structure::Extent => "extent tree",
            Structure::IndirectBlock => "indirect block",
            Structure::DirEntry => "directory entry",
            Structure::DxNode => "htree node",
            Structure::Xattr => "extended attribute",
            Structure::Symlink => "symlink",
            Structure::Journal => "journal",
            Structure::Mmp => "MMP block",
        };
        f.write_str(s)
    }
}

/// Where a corrupt structure was found.
///
/// As precise as the code that noticed knew: a parser handed bare bytes
/// says [`Location::Unknown`] and its caller adds the block
/// ([`Error::at_block`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Location {
    /// Not known, or the whole filesystem (e.g. the primary superblock).
    Unknown,
    /// A filesystem block.
    Block(u64),
    /// A byte offset inside a filesystem block (0 when the block is not
    /// known, e.g. a directory block handed to the parser alone).
    BlockOffset {
        /// The block.
        block: u64,
        /// Byte offset of the bad entry in it.
        offset: usize,
    },
    /// An inode (its record, or something it holds in the record such as
    /// the extent root or the in-inode xattr area).
    Inode(u32),
    /// A byte offset inside an inode's in-inode area.
    InodeOffset {
        /// The inode number.
        ino: u32,
        /// Byte offset in the area.
        offset: usize,
    },
    /// A metadata block belonging to an inode (an extent node, an indirect
    /// block, an xattr block, a directory block) or its record's block.
    InodeBlock {
        /// The inode number.
        ino: u32,
        /// The filesystem block.
        block: u64,
    },
    /// A logical block of a file or directory.
    FileBlock {
        /// The inode number.
        ino: u32,
        /// Logical block in the file.
        lblk: u64,
    },
    /// A block group (its descriptor or bitmaps).
    Group(u32),
    /// A block group's metadata block.
    GroupBlock {
        /// The group.
        group: u32,
        /// The filesystem block (descriptor block, bitmap).
        block: u64,
    },
    /// A block of the journal, counted from the journal's start.
    JournalBlock(u64),
    /// A journal transaction.
    Transaction {
        /// The transaction id.
        tid: u32,
        /// The filesystem block of the log block where it went wrong (0
        /// when not known).
        block: u64,
    },
}

impl Location {
    /// Block `block`, or [`Location::Unknown`] when it is 0 (a parser
    /// called on bytes whose block its caller did not say).
    pub fn from_block(block: u64) -> Location {
        if block == 0 {
            Location::Unknown
        } else {
            Location::Block(block)
        }
    }

    /// A block belonging to inode `ino`, or the inode itself when `block`
    /// is 0 (an extent root or other structure inside the inode record).
    pub fn inode_block(ino: u32, block: u64) -> Location {
        if block == 0 {
            Location::Inode(ino)
        } else {
            Location::InodeBlock { ino, block }
        }
    }

    /// The filesystem block this location is in, if it names one.
    pub fn block(&self) -> Option<u64> {
        match *self {
            Location::Block(b) | Location::InodeBlock { block: b, .. } | Location::GroupBlock { block: b, .. } => {
                Some(b)
            }
            Location::BlockOffset { block, .. } | Location::Transaction { block, .. } if block != 0 => Some(block),
            _ => None,
        }
    }

    /// The inode this location is in or under, if it names one.
    pub fn ino(&self) -> Option<u32> {
        match *self {
            Location::Inode(ino)
            | Location::InodeOffset { ino, .. }
            | Location::InodeBlock { ino, .. }
            | Location::FileBlock { ino, .. } => Some(ino),
            _ => None,
        }
    }

    /// This location, placed in filesystem block `block` if it does not
    /// name one yet (byte offsets, inodes and transactions are kept).
    pub fn at_block(self, block: u64) -> Location {
        match self {
            Location::Unknown | Location::Block(_) => Location::Block(block),
            Location::BlockOffset { offset, .. } => Location::BlockOffset { block, offset },
            Location::Inode(ino) | Location::InodeBlock { ino, .. } => Location::InodeBlock { ino, block },
            Location::Group(group) | Location::GroupBlock { group, .. } => Location::GroupBlock { group, block },
            Location::Transaction { tid, .. } => Location::Transaction { tid, block },
            other => other,
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Location::Unknown => f.write_str("location unknown"),
            Location::Block(b) => write!(f, "block {b}"),
            Location::BlockOffset { block: 0, offset } => write!(f, "offset {offset}"),
            Location::BlockOffset { block, offset } => write!(f, "block {block}, offset {offset}"),
            Location::Inode(ino) => write!(f, "inode {ino}"),
            Location::InodeOffset { ino, offset } => write!(f, "inode {ino}, offset {offset}"),
            Location::InodeBlock { ino, block } => write!(f, "inode {ino}, block {block}"),
            Location::FileBlock { ino, lblk } => write!(f, "inode {ino}, logical block {lblk}"),
            Location::Group(g) => write!(f, "group {g}"),
            Location::GroupBlock { group, block } => write!(f, "group {group}, block {block}"),
            Location::JournalBlock(j) => write!(f, "journal block {j}"),
            Location::Transaction { tid, block: 0 } => write!(f, "transaction {tid}"),
            Location::Transaction { tid, block } => write!(f, "transaction {tid}, block {block}"),
        }
    }
}

/// What is wrong with a corrupt structure.
///
/// `field` and `what` name the on-disk field (its kernel name where it has
/// one, e.g. `"rec_len"`, `"eh_depth"`) or the part of the structure, so a
/// caller can match on `CorruptKind::OutOfRange { field: "rec_len", .. }`.
/// Checksum mismatches are not here: they are [`Error::Checksum`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CorruptKind {
    /// The magic number is wrong.
    BadMagic {
        /// The value found.
        found: u64,
    },
    /// The bytes are fewer than the structure needs.
    TooShort {
        /// Bytes available.
        len: usize,
        /// Bytes the structure needs.
        need: usize,
    },
    /// An entry (or its name, value or record) runs past the end of its
    /// block or area.
    CrossesEnd {
        /// The part that crosses the end.
        what: &'static str,
    },
    /// A field holds a value outside the range it may take.
    OutOfRange {
        /// The field.
        field: &'static str,
        /// The value found.
        value: u64,
    },
    /// A field disagrees with what the rest of the filesystem implies.
    Mismatch {
        /// The field.
        field: &'static str,
        /// The value found.
        value: u64,
        /// The value expected.
        expected: u64,
    },
    /// A value points outside the range `[start, end)` it must lie in.
    OutsideRange {
        /// What the value is.
        what: &'static str,
        /// The value found.
        value: u64,
        /// Start of the valid range.
        start: u64,
        /// End of the valid range (exclusive).
        end: u64,
    },
    /// Blocks `block..block + len` named by a pointer lie (partly) outside
    /// the filesystem.
    OutsideFilesystem {
        /// What points there.
        what: &'static str,
        /// First block.
        block: u64,
        /// Number of blocks.
        len: u64,
    },
    /// Blocks to free overlap the filesystem's own metadata.
    OverlapsMetadata {
        /// First block.
        block: u64,
        /// Number of blocks.
        len: u64,
    },
    /// Extents (or blocks to map) overlap at logical block `at`.
    Overlap {
        /// The logical block where they meet.
        at: u64,
    },
    /// Entries that must be sorted are not.
    OutOfOrder {
        /// The entries.
        what: &'static str,
        /// The key or index where the order breaks.
        at: u64,
    },
    /// A tree is deeper than its format allows.
    TooDeep {
        /// The tree.
        what: &'static str,
        /// The depth found.
        depth: u64,
        /// The deepest allowed.
        max: u64,
    },
    /// A chain (the orphan list) loops or leaves its valid range.
    Loop {
        /// The chain.
        what: &'static str,
        /// The value where it went wrong.
        at: u64,
    },
    /// A block that must be mapped is a hole.
    Hole {
        /// The logical block.
        lblk: u64,
    },
    /// A free of something already free: blocks `first..first + count`, or
    /// an inode (`count` 1).
    DoubleFree {
        /// What was freed twice.
        what: &'static str,
        /// First block or inode number.
        first: u64,
        /// How many.
        count: u64,
    },
    /// Something is not the type it must be (a journal block type, an
    /// extent node where a leaf is due, an inode that is not a regular
    /// file).
    WrongType {
        /// What was expected.
        expected: &'static str,
        /// The type code found (block type, depth, mode).
        found: u64,
    },
    /// The metadata_csum tail a block must carry is missing.
    MissingChecksumTail,
    /// Two settings that cannot go together.
    Conflict {
        /// The first.
        a: &'static str,
        /// The second.
        b: &'static str,
    },
    /// Something that must hold at least one item is empty.
    Empty {
        /// What is empty.
        what: &'static str,
    },
    /// An inode that is referenced is not in use (mode and link count 0).
    NotInUse,
    /// Something that must exist does not.
    Missing {
        /// What is missing.
        what: &'static str,
    },
    /// A structure changed while it was being updated (a concurrent
    /// writer outside this filesystem's locks, or a device that does not
    /// keep what it was given).
    Changed {
        /// What changed.
        what: &'static str,
    },
    /// More items than the structure or the implementation allows.
    TooMany {
        /// What there are too many of.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
    /// A value does not decode as its format (a POSIX ACL, ...).
    Malformed {
        /// What is malformed.
        what: &'static str,
    },
    /// A block of a journal transaction fails its checksum where the
    /// kernel stops recovery with an error.
    TransactionChecksum {
        /// The block (or blocks) that failed.
        what: &'static str,
    },
    /// A transaction's commit block fails its checksum: the `replayed`
    /// transactions before it were replayed and the journal was left for
    /// e2fsck.
    BadCommit {
        /// Transactions replayed before it.
        replayed: u64,
    },
    /// Recovery did not end where its scan said it would.
    RecoveryMismatch {
        /// Transaction id where it ended.
        ended: u64,
        /// Transaction id expected.
        expected: u64,
    },
    /// An on-disk counter (`i_blocks`, a link count, a free or used
    /// count, quota usage) holds less than what is to be taken from it:
    /// it was wrong before, and clamping it at zero would hide that.
    Underflow {
        /// The counter.
        field: &'static str,
        /// Its value.
        value: u64,
        /// What was to be taken from it.
        sub: u64,
    },
    /// The filesystem superblock is invalid after replaying the journal.
    InvalidAfterReplay {
        /// Why the replayed superblock was refused.
        cause: String,
    },
    /// The root inode is no usable directory (the kernel's "corrupt root
    /// inode, run e2fsck"): not a directory, or without size or blocks.
    BadRoot {
        /// Its `i_mode`.
        mode: u16,
        /// Its `i_size`.
        size: u64,
        /// Its `i_blocks`, in 512-byte units.
        blocks: u64,
    },
}

impl std::fmt::Display for CorruptKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CorruptKind::BadMagic { found } => write!(f, "bad magic {found:#x}"),
            CorruptKind::TooShort { len, need } => write!(f, "truncated: {len} bytes, {need} needed"),
            CorruptKind::CrossesEnd { what } => write!(f, "{what} crosses the end"),
            CorruptKind::OutOfRange { field, value } => write!(f, "{field} {value} out of range"),
            CorruptKind::Mismatch { field, value, expected } => write!(f, "{field} is {value}, expected {expected}"),
            CorruptKind::OutsideRange { what, value, start, end } => {
                write!(f, "{what} {value} outside [{start}, {end})")
            }
            CorruptKind::OutsideFilesystem { what, block, len } => {
                write!(f, "{what} {block}+{len} outside the filesystem")
            }
            CorruptKind::OverlapsMetadata { block, len } => {
                write!(f, "free of blocks {block}+{len} overlaps filesystem metadata")
            }
            CorruptKind::Overlap { at } => write!(f, "extents overlap or out of order at logical block {at}"),
            CorruptKind::OutOfOrder { what, at } => write!(f, "{what} out of order at {at}"),
            CorruptKind::TooDeep { what, depth, max } => write!(f, "{what} depth {depth} exceeds {max}"),
            CorruptKind::Loop { what, at } => write!(f, "{what} loops or points at {at}"),
            CorruptKind::Hole { lblk } => write!(f, "block {lblk} is a hole"),
            CorruptKind::DoubleFree { what, first, count } => write!(f, "double free of {what} {first}+{count}"),
            CorruptKind::WrongType { expected, found } => write!(f, "expected {expected}, found type {found}"),
            CorruptKind::MissingChecksumTail => f.write_str("missing checksum tail"),
            CorruptKind::Conflict { a, b } => write!(f, "{a} conflicts with {b}"),
            CorruptKind::Empty { what } => write!(f, "{what} is empty"),
            CorruptKind::NotInUse => f.write_str("not in use"),
            CorruptKind::Missing { what } => write!(f, "{what} is missing"),
            CorruptKind::Changed { what } => write!(f, "{what} changed underneath"),
            CorruptKind::Underflow { field, value, sub } => write!(f, "{field} {value} is less than the {sub} to take"),
            CorruptKind::TooMany { what, limit } => write!(f, "more than {limit} {what}"),
            CorruptKind::Malformed { what } => write!(f, "malformed {what}"),
            CorruptKind::TransactionChecksum { what } => write!(f, "invalid checksum found in {what}"),
            CorruptKind::BadCommit { replayed } => write!(
                f,
                "bad commit block checksum; the {replayed} transaction(s) before it were replayed and the journal \
                 was left for e2fsck"
            ),
            CorruptKind::RecoveryMismatch { ended, expected } => {
                write!(f, "recovery ended at transaction {ended}, expected {expected}")
            }
            CorruptKind::InvalidAfterReplay { cause } => {
                write!(f, "the superblock is invalid after replaying the journal ({cause}); recovery not completed")
            }
            CorruptKind::BadRoot { mode, size, blocks } => write!(
                f,
                "the root inode is not a usable directory (mode {mode:#o}, size {size}, {blocks} sectors); run e2fsck"
            ),
        }
    }
}

/// A corrupt on-disk structure: which, where, and what is wrong.
///
/// Callers match on it through [`Error::Corrupt`]:
/// `Err(Error::Corrupt(c)) if c.kind == CorruptKind::MissingChecksumTail`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The structure that is damaged.
    pub structure: Structure,
    /// Where it is.
    pub location: Location,
    /// What is wrong with it.
    pub kind: CorruptKind,
}

impl std::fmt::Display for Corruption {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.location {
            Location::Unknown => write!(f, "corrupt {}: {}", self.structure, self.kind),
            l => write!(f, "corrupt {} ({l}): {}", self.structure, self.kind),
        }
    }
}

/// Errors returned by uext4.
///
/// Match on the variant to tell a caller's mistake (`NotFound`, `Exists`,
/// `Invalid`, ...) from a damaged image ([`Error::Corrupt`],
/// [`Error::Checksum`]) or a failing device ([`Error::Io`]);
/// [`Error::errno`] gives the errno the kernel would return, and the
/// `From` conversion into `std::io::Error` lets `?` work in `io::Result`
/// code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The underlying device failed.
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The image is not ext2/3/4 (bad magic, impossible geometry).
    #[error("not an ext4 filesystem: {0}")]
    NotExt4(String),
    /// An on-disk structure is inconsistent: which one, where, and what is
    /// wrong with it, as a [`Corruption`] callers can match on.
    #[error("{0}")]
    Corrupt(Box<Corruption>),
    /// A metadata checksum does not match.
    #[error("checksum mismatch in {structure} ({}): stored {stored:#010x}, computed {computed:#010x}", checksum_place(*block, *ino))]
    Checksum {
        /// The structure whose checksum failed.
        structure: Structure,
        /// The block it lives in.
        block: u64,
        /// The inode it is, or belongs to (0: none, or not known to the
        /// code that found it); recorded as the error's inode, as the
        /// kernel's ext4_error_inode does.
        ino: u32,
        /// The checksum stored on disk.
        stored: u32,
        /// The checksum computed over the contents.
        computed: u32,
    },
    /// The image uses features this implementation refuses.
    #[error("unsupported feature(s): {0}")]
    Unsupported(String),
    /// A write was attempted on a read-only filesystem or handle.
    #[error("read-only filesystem: {0}")]
    ReadOnly(String),
    /// A path component does not exist.
    #[error("no such file or directory: {0}")]
    NotFound(String),
    /// A path component is not a directory.
    #[error("not a directory: {0}")]
    NotDir(String),
    /// A directory was given where a non-directory was expected.
    #[error("is a directory: {0}")]
    IsDir(String),
    /// A name is longer than 255 bytes.
    #[error("file name too long: {0}")]
    NameTooLong(String),
    /// An argument is invalid (bad offset, bad name, wrong file type).
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// An inode number outside the filesystem's range.
    #[error("bad inode number {0}")]
    BadInode(u64),
    /// Too many symbolic links were followed while resolving a path.
    #[error("too many levels of symbolic links: {0}")]
    Loop(String),
    /// No free space (blocks or inodes) for the request.
    #[error("no space left on device: {0}")]
    NoSpace(String),
    /// A disk quota's hard limit (space or inodes of a user, group or
    /// project) would be exceeded.
    #[error("disk quota exceeded: {0}")]
    QuotaExceeded(String),
    /// A link or rename into a directory whose project the file does not
    /// share (a PROJINHERIT directory keeps its tree in one project).
    #[error("invalid cross-device link: {0}")]
    CrossDevice(String),
    /// The named extended attribute does not exist.
    #[error("no such attribute: {0}")]
    NoAttr(String),
    /// The name already exists.
    #[error("file exists: {0}")]
    Exists(String),
    /// A directory to remove or replace is not empty.
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    /// The link count would exceed the limit.
    #[error("too many links: {0}")]
    TooManyLinks(String),
    /// An offset or size beyond the largest file ext4 can hold.
    #[error("file too large: {0}")]
    FileTooBig(String),
    /// The object is in use (the root directory, a mountpoint).
    #[error("device or resource busy: {0}")]
    Busy(String),
    /// The operation is not permitted (e.g. a hard link to a directory).
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// A name or value is outside the range the call accepts (an extended
    /// attribute name that is empty or longer than 255 bytes).
    #[error("out of range: {0}")]
    Range(String),
    /// Access is refused (e.g. a default ACL on a non-directory).
    #[error("permission denied: {0}")]
    AccessDenied(String),
}

/// Where a checksum error was found, for its message.
fn checksum_place(block: u64, ino: u32) -> String {
    if ino == 0 {
        format!("block {block}")
    } else {
        format!("inode {ino}, block {block}")
    }
}

impl Error {
    /// A corruption error: `structure` at `location` is wrong in the way
    /// `kind` says.
    pub fn corruption(structure: Structure, location: Location, kind: CorruptKind) -> Self {
        Error::Corrupt(Box::new(Corruption { structure, location, kind }))
    }

    /// The corruption this error reports, if it is one.
    pub fn as_corruption(&self) -> Option<&Corruption> {
        match self {
            Error::Corrupt(c) => Some(c),
            _ => None,
        }
    }

    /// The filesystem block a corruption or checksum error was found in
    /// (what ext4 records as `s_first_error_block`), if known.
    pub fn block(&self) -> Option<u64> {
        match self {
            Error::Corrupt(c) => c.location.block(),
            Error::Checksum { block, .. } => Some(*block),
            _ => None,
        }
    }

    /// The inode a corruption or checksum error was found in or under
    /// (what ext4 records as `s_first_error_ino`), if known.
    pub fn ino(&self) -> Option<u32> {
        match self {
            Error::Corrupt(c) => c.location.ino(),
            Error::Checksum { ino, .. } if *ino != 0 => Some(*ino),
            _ => None,
        }
    }

    /// The same error found in filesystem block `block`, for errors from a
    /// parser that did not know where its bytes came from: a corruption
    /// without a block gets `block` (keeping its byte offset and inode),
    /// a checksum error's block is replaced. Other errors pass through.
    pub fn at_block(self, block: u64) -> Error {
        match self {
            Error::Corrupt(mut c) => {
                c.location = c.location.at_block(block);
                Error::Corrupt(c)
            }
            Error::Checksum { structure, ino, stored, computed, .. } => {
                Error::Checksum { structure, block, ino, stored, computed }
            }
            other => other,
        }
    }

    /// The errno a POSIX caller expects for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Io(e) => e.raw_os_error().unwrap_or(libc::EIO),
            Error::NotExt4(_) => libc::EINVAL,
            Error::Corrupt { .. } => libc::EUCLEAN,
            Error::Checksum { .. } => libc::EBADMSG,
            Error::Unsupported(_) => libc::EOPNOTSUPP,
            Error::ReadOnly(_) => libc::EROFS,
            Error::NotFound(_) => libc::ENOENT,
            Error::NotDir(_) => libc::ENOTDIR,
            Error::IsDir(_) => libc::EISDIR,
            Error::NameTooLong(_) => libc::ENAMETOOLONG,
            Error::Invalid(_) => libc::EINVAL,
            Error::BadInode(_) => libc::ESTALE,
            Error::Loop(_) => libc::ELOOP,
            Error::NoAttr(_) => libc::ENODATA,
            Error::NoSpace(_) => libc::ENOSPC,
            Error::QuotaExceeded(_) => libc::EDQUOT,
            Error::CrossDevice(_) => libc::EXDEV,
            Error::Exists(_) => libc::EEXIST,
            Error::NotEmpty(_) => libc::ENOTEMPTY,
            Error::TooManyLinks(_) => libc::EMLINK,
            Error::FileTooBig(_) => libc::EFBIG,
            Error::Busy(_) => libc::EBUSY,
            Error::NotPermitted(_) => libc::EPERM,
            Error::Range(_) => libc::ERANGE,
            Error::AccessDenied(_) => libc::EACCES,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `value - sub` for the on-disk counter `field` of `structure` at
/// `location`; a corruption error ([`CorruptKind::Underflow`]) when the
/// counter holds less than `sub`. Counters must never be clamped at zero
/// instead: the count was already wrong, and a clamp would carry the
/// damage on silently (a later free of the same units then "succeeds").
pub fn sub_counter<T>(value: T, sub: T, field: &'static str, structure: Structure, location: Location) -> Result<T>
where
    T: Copy + Into<u64> + PartialOrd + std::ops::Sub<Output = T>,
{
    if value < sub {
        let kind = CorruptKind::Underflow { field, value: value.into(), sub: sub.into() };
        return Err(Error::corruption(structure, location, kind));
    }
    Ok(value - sub)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn corruption_display_names_structure_location_and_kind() {
        let e = Error::corruption(
            Structure::DirEntry,
            Location::BlockOffset { block: 1234, offset: 24 },
            CorruptKind::OutOfRange { field: "rec_len", value: 13 },
        );
        assert_eq!(e.to_string(), "corrupt directory entry (block 1234, offset 24): rec_len 13 out of range");
        assert_eq!(e.errno(), libc::EUCLEAN);
        assert_eq!(e.block(), Some(1234));
        let e = Error::corruption(Structure::Journal, Location::Unknown, CorruptKind::BadMagic { found: 0xdead });
        assert_eq!(e.to_string(), "corrupt journal: bad magic 0xdead");
        assert_eq!(e.block(), None);
    }

    #[test]
    fn at_block_fills_in_the_block_and_keeps_the_rest() {
        let kind = CorruptKind::MissingChecksumTail;
        let e = Error::corruption(Structure::Extent, Location::Unknown, kind.clone()).at_block(77);
        assert_eq!(e.as_corruption().map(|c| c.location), Some(Location::Block(77)));
        let e = Error::corruption(Structure::DirEntry, Location::BlockOffset { block: 0, offset: 8 }, kind.clone());
        assert_eq!(
            e.at_block(5).as_corruption().map(|c| c.location),
            Some(Location::BlockOffset { block: 5, offset: 8 })
        );
        let e = Error::corruption(Structure::Journal, Location::Transaction { tid: 9, block: 0 }, kind);
        assert_eq!(e.at_block(6).block(), Some(6));
        let e = Error::Checksum { structure: Structure::Inode, block: 1, ino: 0, stored: 2, computed: 3 }.at_block(4);
        assert_eq!(e.block(), Some(4));
        assert!(matches!(Error::Invalid("x".into()).at_block(4), Error::Invalid(_)));
        assert_eq!(Location::inode_block(12, 0), Location::Inode(12));
        assert_eq!(Location::inode_block(12, 3).block(), Some(3));
        assert_eq!(Location::from_block(0), Location::Unknown);
    }
}
