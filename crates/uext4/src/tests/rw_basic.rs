//! Read-write basics: open/unmount cycles, journaled allocation and
//! freeing, inode allocation; every image ends e2fsck-clean.

use super::rw_support;

use rw_support::{fsck_clean, mkfs};
use uext4::alloc::{flags, AllocRequest};
use uext4::txn::FreeKind;
use uext4::Filesystem;

#[test]
fn open_rw_and_unmount_is_clean() {
    for args in [&["-b", "1024"][..], &["-b", "4096"], &["-O", "^metadata_csum"], &["-O", "^has_journal"]] {
        let Some((_d, img)) = mkfs(64, args) else { return };
        let mut fs = Filesystem::open_rw(&img).unwrap();
        assert!(!fs.is_read_only());
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        assert!(!fs.superblock().needs_recovery(), "{args:?}");
    }
}

#[test]
fn journaled_alloc_and_free_stay_consistent() {
    for args in [&["-b", "1024"][..], &["-b", "4096"], &["-O", "^has_journal"], &["-O", "^metadata_csum,uninit_bg"]] {
        let Some((_d, img)) = mkfs(64, args) else { return };
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let free0 = fs.statfs().free_blocks;
        let mut got = Vec::new();
        for i in 0..50u32 {
            let tx = fs.begin(8).unwrap();
            // Raw changes, consistent or not: no abort at drop.
            tx.settle();
            let a = tx
                .alloc_blocks(&AllocRequest { len: 1 + i % 7, flags: flags::METADATA, ..Default::default() })
                .unwrap();
            got.push(a);
            drop(tx);
            if i % 10 == 0 {
                fs.commit().unwrap();
            }
        }
        for a in got.iter().step_by(2) {
            let tx = fs.begin(8).unwrap();
            // Raw changes, consistent or not: no abort at drop.
            tx.settle();
            tx.free_blocks(a.start, u64::from(a.len), FreeKind::Metadata).unwrap();
        }
        for a in got.iter().skip(1).step_by(2) {
            let tx = fs.begin(8).unwrap();
            // Raw changes, consistent or not: no abort at drop.
            tx.settle();
            tx.free_blocks(a.start, u64::from(a.len), FreeKind::Data).unwrap();
        }
        fs.unmount().unwrap();
        drop(fs);
        fsck_clean(&img);
        let fs = Filesystem::open(&img).unwrap();
        let free1: u64 = fs.group_descs().iter().map(|g| u64::from(g.free_blocks_count)).sum();
        assert_eq!(free1, fs.superblock().free_blocks_count, "{args:?}");
        let _ = free0;
    }
}

/// A deletion whose blocks and inode are in the same group journals that
/// group's descriptor once for both frees (`Tx::batch_groups`): both
/// changes must land in it. Planning the inode group's change on the
/// descriptor as it was before the block group's (and encoding it after)
/// wrote back the old free block count and block bitmap checksum.
#[test]
fn a_deletion_in_one_group_keeps_both_descriptor_changes() {
    use std::sync::Arc;
    use uext4::device::{BlockDevice, FileDevice};
    use uext4::volume::Volume;
    let descs = |img: &std::path::Path| {
        let dev: Arc<dyn BlockDevice> = Arc::new(FileDevice::open(img, false).unwrap());
        let vol = Volume::open(dev, 64).unwrap();
        vol.groups.iter().map(|g| (g.free_blocks_count, g.free_inodes_count)).collect::<Vec<_>>()
    };
    // One group: the file's blocks and its inode are in group 0.
    for (args, mb) in
        [(&["-b", "4096"][..], 16), (&["-b", "4096", "-O", "bigalloc", "-C", "16384"], 16), (&["-b", "1024"], 8)]
    {
        let Some((_d, img)) = mkfs(mb, args) else { return };
        let before = descs(&img);
        assert_eq!(before.len(), 1, "{args:?}: one group");
        let mut fs = Filesystem::open_rw(&img).unwrap();
        let ino = fs.create(2, b"f", 0o644, 0, 0).unwrap().ino;
        fs.inodes().write(ino, 0, &vec![7u8; 1 << 20]).unwrap();
        // Written back and committed: the unlink frees blocks and the inode.
        fs.sync().unwrap();
        fs.unlink(2, b"f").unwrap();
        fs.unmount().unwrap();
        drop(fs);
        assert_eq!(descs(&img), before, "{args:?}: (free blocks, free inodes) of the group after the deletion");
        fsck_clean(&img);
    }
}
