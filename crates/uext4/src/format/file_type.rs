//! The file type of an inode, as `i_mode` and directory entries encode it.

/// File type bits of `i_mode`.
pub const S_IFMT: u16 = 0xF000;
/// Socket.
pub const S_IFSOCK: u16 = 0xC000;
/// Symbolic link.
pub const S_IFLNK: u16 = 0xA000;
/// Regular file.
pub const S_IFREG: u16 = 0x8000;
/// Block device.
pub const S_IFBLK: u16 = 0x6000;
/// Directory.
pub const S_IFDIR: u16 = 0x4000;
/// Character device.
pub const S_IFCHR: u16 = 0x2000;
/// FIFO.
pub const S_IFIFO: u16 = 0x1000;

/// The type of an inode, from `i_mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileType {
    /// Regular file.
    Regular,
    /// Directory.
    Directory,
    /// Symbolic link.
    Symlink,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
    /// Named pipe.
    Fifo,
    /// Unix socket.
    Socket,
}

impl FileType {
    /// Decodes the `S_IFMT` bits of a mode; `None` for invalid types.
    pub fn from_mode(mode: u16) -> Option<FileType> {
        Some(match mode & S_IFMT {
            S_IFREG => FileType::Regular,
            S_IFDIR => FileType::Directory,
            S_IFLNK => FileType::Symlink,
            S_IFCHR => FileType::CharDevice,
            S_IFBLK => FileType::BlockDevice,
            S_IFIFO => FileType::Fifo,
            S_IFSOCK => FileType::Socket,
            _ => return None,
        })
    }

    /// Decodes a directory entry's file type byte (filetype feature).
    pub fn from_dirent(t: u8) -> Option<FileType> {
        Some(match t {
            1 => FileType::Regular,
            2 => FileType::Directory,
            3 => FileType::CharDevice,
            4 => FileType::BlockDevice,
            5 => FileType::Fifo,
            6 => FileType::Socket,
            7 => FileType::Symlink,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mode_and_dirent_types_agree() {
        let by_mode =
            [S_IFREG, S_IFDIR, S_IFCHR, S_IFBLK, S_IFIFO, S_IFSOCK, S_IFLNK].map(|m| FileType::from_mode(m | 0o644));
        let by_dirent = [1u8, 2, 3, 4, 5, 6, 7].map(FileType::from_dirent);
        assert_eq!(by_mode, by_dirent);
        assert!(by_mode.iter().all(Option::is_some));
        assert_eq!(FileType::from_mode(0o644), None);
        assert_eq!(FileType::from_mode(0xE000), None);
        assert_eq!(FileType::from_dirent(0), None);
        assert_eq!(FileType::from_dirent(8), None);
    }
}
