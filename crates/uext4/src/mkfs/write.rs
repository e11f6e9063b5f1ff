//! Writing a computed layout to a device.

use super::blockmap::{self, BlockMap};
use super::layout::{Layout, FIRST_INO, LPF_INO};
use super::options::MkfsOptions;
use crate::device::BlockDevice;
use crate::error::{Error, Result};
use crate::format::block_number::LogicalBlock;
use crate::format::bytes::{put_le16, put_le32};
use crate::format::checksum::crc32c;
use crate::format::dirent::{file_type_of, set_leaf_checksum, write_entry, write_tail};
use crate::format::extent::{encode_node, set_block_checksum, Extent, ExtentHeader, ExtentIndex, ExtentNode};
use crate::format::features::{compat, incompat, ro_compat};
use crate::format::group_desc::{GroupDesc, BG_BLOCK_UNINIT, BG_INODE_UNINIT, BG_INODE_ZEROED};
use crate::format::inode::{Inode, Timestamp, FL_EXTENTS, JOURNAL_INO, RESIZE_INO, ROOT_INO, S_IFDIR, S_IFREG};
use crate::format::mmp::{self, Mmp};
use crate::format::quota::QuotaType;
use crate::fs::mmp::nodename;

use crate::format::orphan_file;
use crate::format::superblock::{Superblock, EXT4_MAGIC, SUPERBLOCK_OFFSET, SUPERBLOCK_SIZE};

fn random_bytes() -> [u8; 16] {
    let mut b = [0u8; 16];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        use std::io::Read;
        let _ = f.read_exact(&mut b);
    }
    b
}

/// `EXT4_IMMUTABLE_FL`: mke2fs's quota inodes carry it.
const FL_IMMUTABLE: u32 = 0x10;

/// A random (version 4) UUID.
fn uuid_v4() -> [u8; 16] {
    let mut u = random_bytes();
    u[6] = (u[6] & 0x0F) | 0x40;
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

/// 100-ns intervals from the Gregorian calendar's start (1582-10-15) to
/// the Unix epoch: the origin of a version 1 UUID's timestamp.
const GREGORIAN_TO_UNIX: u64 = 0x01B2_1DD2_1381_4000;

/// A time-based (version 1, RFC 4122) UUID, as libuuid's
/// `uuid_generate_time` makes it for `mke2fs -U time`: the current time
/// in 100-ns intervals since 1582-10-15, a random 14-bit clock sequence,
/// and the first network interface's MAC address as the node (a random
/// node with the multicast bit set, as the RFC asks, when there is none).
pub fn time_uuid() -> [u8; 16] {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let ts = GREGORIAN_TO_UNIX + since.as_secs() * 10_000_000 + u64::from(since.subsec_nanos() / 100);
    let r = random_bytes();
    let node = mac_address().unwrap_or_else(|| {
        let mut n = [0u8; 6];
        n.copy_from_slice(&r[2..8]);
        n[0] |= 0x01;
        n
    });
    let mut u = [0u8; 16];
    u[0..4].copy_from_slice(&(ts as u32).to_be_bytes());
    u[4..6].copy_from_slice(&((ts >> 32) as u16).to_be_bytes());
    u[6..8].copy_from_slice(&(((ts >> 48) as u16 & 0x0FFF) | 0x1000).to_be_bytes());
    u[8] = (r[0] & 0x3F) | 0x80;
    u[9] = r[1];
    u[10..16].copy_from_slice(&node);
    u
}

/// The MAC address of the first interface (by name) in /sys/class/net
/// that has a non-zero one, loopback excluded: libuuid's node id.
fn mac_address() -> Option<[u8; 6]> {
    let mut names: Vec<_> = std::fs::read_dir("/sys/class/net").ok()?.flatten().map(|e| e.file_name()).collect();
    names.sort();
    names.into_iter().filter(|n| n != "lo").find_map(|n| {
        let text = std::fs::read_to_string(std::path::Path::new("/sys/class/net").join(n).join("address")).ok()?;
        let mut mac = [0u8; 6];
        let mut parts = text.trim().split(':');
        for b in &mut mac {
            *b = u8::from_str_radix(parts.next()?, 16).ok()?;
        }
        (parts.next().is_none() && mac != [0; 6]).then_some(mac)
    })
}

/// A version-4-shaped UUID derived from a fixed time and the label, for
/// reproducible images: `tag` tells the UUID and the hash seed apart.
fn derived_uuid(tag: &[u8], time: Timestamp, label: &str) -> [u8; 16] {
    let mut u = [0u8; 16];
    for (i, word) in u.chunks_mut(4).enumerate() {
        let mut c = crc32c(i as u32, tag);
        c = crc32c(c, &time.sec.to_le_bytes());
        c = crc32c(c, label.as_bytes());
        word.copy_from_slice(&c.to_le_bytes());
    }
    u[6] = (u[6] & 0x0F) | 0x40;
    u[8] = (u[8] & 0x3F) | 0x80;
    u
}

struct Writer<'a> {
    dev: &'a dyn BlockDevice,
    bs: usize,
}

impl Writer<'_> {
    fn block(&self, b: u64, data: &[u8]) -> Result<()> {
        Ok(self.dev.write_at(data, b * self.bs as u64)?)
    }
}

/// The superblock's raw bytes for group `g` (backups record their group).
fn superblock_raw(l: &Layout, opts: &MkfsOptions, ids: &Ids, free_blocks: u64, free_inodes: u32) -> Result<Superblock> {
    let mut b = [0u8; SUPERBLOCK_SIZE];
    let now = ids.now;
    let log = l.block_size.trailing_zeros() - 10;
    let log_cluster = (l.block_size * l.cluster_ratio).trailing_zeros() - 10;
    let clusters_per_group = l.blocks_per_group / l.cluster_ratio;
    let r_blocks = l.blocks_count * u64::from(opts.reserved_percent) / 100;
    put_le32(&mut b, 0x0, l.inodes_per_group * l.groups);
    put_le32(&mut b, 0x4, l.blocks_count as u32);
    put_le32(&mut b, 0x8, r_blocks as u32);
    put_le32(&mut b, 0xC, free_blocks as u32);
    put_le32(&mut b, 0x10, free_inodes);
    put_le32(&mut b, 0x14, l.first_data_block);
    put_le32(&mut b, 0x18, log);
    put_le32(&mut b, 0x1C, log_cluster);
    put_le32(&mut b, 0x20, l.blocks_per_group);
    put_le32(&mut b, 0x24, clusters_per_group);
    put_le32(&mut b, 0x28, l.inodes_per_group);
    put_le32(&mut b, 0x30, now.sec as u32);
    put_le16(&mut b, 0x36, 0xFFFF);
    put_le16(&mut b, 0x38, EXT4_MAGIC);
    put_le16(&mut b, 0x3A, 1);
    put_le16(&mut b, 0x3C, 1);
    put_le32(&mut b, 0x40, now.sec as u32);
    put_le32(&mut b, 0x4C, 1);
    put_le32(&mut b, 0x54, FIRST_INO);
    put_le16(&mut b, 0x58, l.inode_size);
    let journal = !l.journal.is_empty();
    let mut compat_f = compat::EXT_ATTR | compat::DIR_INDEX;
    if journal {
        compat_f |= compat::HAS_JOURNAL;
    }
    let feat = opts.features;
    let orphan = l.orphan.1 > 0;
    if orphan {
        compat_f |= compat::ORPHAN_FILE;
    }
    if journal && l.fc_blocks > 0 {
        compat_f |= compat::FAST_COMMIT;
    }
    if l.reserved_gdt > 0 {
        compat_f |= compat::RESIZE_INODE;
        put_le16(&mut b, 0xCE, l.reserved_gdt as u16);
    }
    put_le32(&mut b, 0x5C, compat_f);
    let mut inc = incompat::FILETYPE;
    for (on, bit) in [
        (feat.extent, incompat::EXTENTS),
        (feat.bit64, incompat::BIT64),
        (feat.flex_bg, incompat::FLEX_BG),
        (feat.metadata_csum_seed, incompat::CSUM_SEED),
        (feat.inline_data, incompat::INLINE_DATA),
        (feat.ea_inode, incompat::EA_INODE),
        (feat.large_dir, incompat::LARGEDIR),
        (feat.casefold, incompat::CASEFOLD),
        (feat.mmp, incompat::MMP),
    ] {
        if on {
            inc |= bit;
        }
    }
    put_le32(&mut b, 0x60, inc);
    let mut ro = ro_compat::SPARSE_SUPER | ro_compat::LARGE_FILE;
    for (on, bit) in [
        (feat.huge_file, ro_compat::HUGE_FILE),
        (feat.dir_nlink, ro_compat::DIR_NLINK),
        (feat.extra_isize, ro_compat::EXTRA_ISIZE),
        (feat.quota, ro_compat::QUOTA),
        (feat.project, ro_compat::PROJECT),
        (feat.bigalloc, ro_compat::BIGALLOC),
    ] {
        if on {
            ro |= bit;
        }
    }
    // Without metadata_csum, uninit_bg (crc16 descriptor checksums) is
    // what makes the uninitialised-group flags valid, as mke2fs does.
    if feat.metadata_csum {
        ro |= ro_compat::METADATA_CSUM;
    } else if feat.uninit_bg {
        ro |= ro_compat::GDT_CSUM;
    }
    put_le32(&mut b, 0x64, ro);
    b[0x68..0x78].copy_from_slice(&ids.uuid);
    let label = opts.label.as_bytes();
    b[0x78..0x78 + label.len().min(16)].copy_from_slice(&label[..label.len().min(16)]);
    if journal {
        put_le32(&mut b, 0xE0, u32::from(JOURNAL_INO as u16));
    }
    b[0xEC..0xFC].copy_from_slice(&ids.hash_seed);
    b[0xFC] = 1; // half_md4
    if journal {
        b[0xFD] = 1; // EXT3_JNL_BACKUP_BLOCKS
        for (i, w) in ids.journal_iblock.iter().enumerate() {
            put_le32(&mut b, 0x10C + 4 * i, *w);
        }
        let jsize = l.journal.iter().map(|r| u64::from(r.1)).sum::<u64>() * u64::from(l.block_size);
        put_le32(&mut b, 0x10C + 4 * 15, (jsize >> 32) as u32);
        put_le32(&mut b, 0x10C + 4 * 16, jsize as u32);
    }
    // s_desc_size counts only with 64bit (mke2fs leaves it 0 otherwise).
    if feat.bit64 {
        put_le16(&mut b, 0xFE, l.desc_size as u16);
    }
    put_le32(&mut b, 0x100, 0x0004 | 0x0008); // user_xattr, acl
    put_le32(&mut b, 0x108, now.sec as u32);
    put_le32(&mut b, 0x150, (l.blocks_count >> 32) as u32);
    put_le32(&mut b, 0x154, (r_blocks >> 32) as u32);
    put_le32(&mut b, 0x158, (free_blocks >> 32) as u32);
    put_le16(&mut b, 0x15C, 32);
    put_le16(&mut b, 0x15E, 32);
    // Directory hashes follow the host's char signedness, as mke2fs does.
    let signed_char = std::ffi::c_char::MIN != 0;
    put_le32(&mut b, 0x160, if signed_char { 0x1 } else { 0x2 });
    b[0x174] = l.flex_size.trailing_zeros() as u8;
    if feat.metadata_csum {
        b[0x175] = 1;
    }
    if feat.metadata_csum_seed {
        put_le32(&mut b, 0x270, crc32c(!0, &ids.uuid));
    }
    put_le32(&mut b, 0x248, l.overhead_clusters as u32);
    if orphan {
        put_le32(&mut b, 0x280, l.orphan_ino);
    }
    for (off, q) in [(0x240, l.quota[0]), (0x244, l.quota[1]), (0x26C, l.quota[2])] {
        if let Some((ino, _, _)) = q {
            put_le32(&mut b, off, ino);
        }
    }
    if feat.mmp {
        put_le16(&mut b, 0x166, opts.mmp_update_interval);
        put_le32(&mut b, 0x168, l.mmp_block as u32);
        put_le32(&mut b, 0x16C, (l.mmp_block >> 32) as u32);
    }
    if feat.casefold {
        put_le16(&mut b, 0x27C, 1); // EXT4_ENC_UTF8_12_1
        put_le16(&mut b, 0x27E, opts.encoding_flags);
    }
    let hi = (now.sec >> 32) as u8;
    b[0x274] = hi; // wtime
    b[0x276] = hi; // mkfs_time
    b[0x277] = hi; // lastcheck
    if feat.metadata_csum {
        let c = crc32c(!0, &b[..0x3FC]);
        put_le32(&mut b, 0x3FC, c);
    }
    Superblock::parse(&b).map_err(|e| Error::Invalid(format!("mkfs built a bad superblock: {e}")))
}

struct Ids {
    uuid: [u8; 16],
    hash_seed: [u8; 16],
    now: Timestamp,
    journal_iblock: [u32; 15],
}

/// The extents mapping `runs` consecutively from logical block 0.
fn extents_of(runs: &[(u64, u32)]) -> Vec<Extent> {
    let mut logical = 0u32;
    runs.iter()
        .map(|&(start, len)| {
            let e = Extent { block: logical.into(), len: len as u16, start: start.into(), unwritten: false };
            logical += len;
            e
        })
        .collect()
}

/// The 60-byte extent root for `runs`: a leaf when they fit, else an
/// index pointing at `leaf_block`.
fn extent_root(runs: &[(u64, u32)], leaf_block: Option<u64>) -> Result<[u8; 60]> {
    let mut root = [0u8; 60];
    let node = match leaf_block {
        None => ExtentNode::Leaf(ExtentHeader { entries: 0, max: 4, depth: 0 }, extents_of(runs)),
        Some(lb) => ExtentNode::Index(
            ExtentHeader { entries: 1, max: 4, depth: 1 },
            vec![ExtentIndex { block: LogicalBlock(0), leaf: lb.into() }],
        ),
    };
    encode_node(&node, &mut root)?;
    Ok(root)
}

/// Blocks to write: (block number, contents).
type RawBlocks = Vec<(u64, Vec<u8>)>;

/// The resize inode (7) as mke2fs makes it, and its blocks: a double
/// indirect block whose entries `(gdt_blocks + k) % per_block` point at the
/// primary reserved descriptor blocks, each of which lists, as an
/// indirect block, its copies in the groups holding superblock backups.
fn resize_inode(l: &Layout, sb: &Superblock) -> Result<(Inode, RawBlocks)> {
    let bs = l.block_size;
    let apb = u64::from(bs / 4);
    let ptr = |b: u64| u32::try_from(b).map_err(|_| Error::Invalid(format!("resize inode: block {b} above 2^32")));
    let backups: Vec<u32> = (1..l.groups).filter(|&g| l.has_super(g)).collect();
    let mut dind = vec![0u32; apb as usize];
    let mut blocks = Vec::new();
    for k in 0..l.reserved_gdt {
        let primary = u64::from(l.first_data_block) + 1 + u64::from(l.gdt_blocks + k);
        dind[((u64::from(l.gdt_blocks + k)) % apb) as usize] = ptr(primary)?;
        let mut list = vec![0u32; apb as usize];
        for (i, &g) in backups.iter().enumerate().take(apb as usize) {
            list[i] = ptr(primary + u64::from(g) * u64::from(l.blocks_per_group))?;
        }
        blocks.push((primary, BlockMap::encode(&list)));
    }
    blocks.push((l.resize_dind, BlockMap::encode(&dind)));
    let mut i = Inode::new_raw(sb, RESIZE_INO);
    i.mode = S_IFREG | 0o600;
    i.links_count = 1;
    // The largest size a double indirect tree reaches, as mke2fs sets it.
    i.size = (apb * apb + apb + 12) * u64::from(bs);
    let counted = 1 + u64::from(l.reserved_gdt) * (1 + backups.len().min(apb as usize) as u64);
    i.blocks_512 = counted * u64::from(bs) / 512;
    let mut ib = [0u32; 15];
    ib[13] = ptr(l.resize_dind)?;
    i.block = BlockMap { i_block: ib, ..Default::default() }.i_block_bytes();
    Ok((i, blocks))
}

/// How a special file's blocks are mapped.
struct Mapped {
    /// The inode's `i_block`.
    i_block: [u8; 60],
    /// `FL_EXTENTS` or 0.
    flags: u32,
    /// Data runs in logical order.
    data: Vec<(u64, u32)>,
    /// Indirect blocks to write (block-mapped files).
    indirect: RawBlocks,
}

/// Maps a file of `n` data blocks whose region (see
/// [`Layout::region_len`]) starts at `start`: one extent, or direct and
/// indirect blocks when the image has no extent feature.
fn map_file(l: &Layout, start: u64, n: u32) -> Result<Mapped> {
    if !l.block_mapped {
        return Ok(Mapped {
            i_block: extent_root(&[(start, n)], None)?,
            flags: FL_EXTENTS,
            data: vec![(start, n)],
            indirect: Vec::new(),
        });
    }
    let len = l.region_len(u64::from(n)) as u32;
    let m = blockmap::build(&[(start, len)], u64::from(n), l.block_size)?;
    Ok(blockmapped(&m, l.block_size))
}

fn blockmapped(m: &blockmap::BlockMap, bs: u32) -> Mapped {
    let indirect = m
        .indirect
        .iter()
        .map(|(b, e)| {
            let mut raw = BlockMap::encode(e);
            raw.resize(bs as usize, 0);
            (*b, raw)
        })
        .collect();
    Mapped { i_block: m.i_block_bytes(), flags: 0, data: m.data.clone(), indirect }
}

/// An empty jbd2 (v2) superblock for an internal journal of `blocks`
/// blocks: log starts at block 1, sequence 1, nothing to recover.
fn journal_superblock(block_size: u32, blocks: u32, fc_blocks: u32, uuid: &[u8; 16]) -> Vec<u8> {
    let mut b = vec![0u8; block_size as usize];
    let be = |b: &mut [u8], off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_be_bytes());
    be(&mut b, 0x0, 0xC03B_3998); // magic
    be(&mut b, 0x4, 4); // superblock v2
    be(&mut b, 0xC, block_size);
    be(&mut b, 0x10, blocks);
    be(&mut b, 0x14, 1); // first log block
    be(&mut b, 0x18, 1); // first expected sequence
    b[0x30..0x40].copy_from_slice(uuid);
    be(&mut b, 0x40, 1); // one user: this filesystem
    be(&mut b, 0x54, fc_blocks); // s_num_fc_blks, within s_maxlen
    b
}

/// Writes a fresh filesystem to `dev`. With `zeroed`, the device is known
/// to read as zeros (a new sparse file): inode tables and the journal are
/// not written and are marked zeroed.
pub fn format_device(dev: &dyn BlockDevice, opts: &MkfsOptions, zeroed: bool) -> Result<Layout> {
    let mut opts = opts.clone();
    opts.size = opts.size.min(dev.size());
    let l = Layout::compute(&opts)?;
    let bs = l.block_size as usize;
    let w = Writer { dev, bs };
    let now = opts.time.unwrap_or_else(Timestamp::now);
    let fresh = |tag: &[u8]| match opts.time {
        Some(t) => derived_uuid(tag, t, &opts.label),
        None => uuid_v4(),
    };
    let uuid = opts.uuid.unwrap_or_else(|| fresh(b"uuid"));
    let hash_seed = opts.hash_seed.unwrap_or_else(|| fresh(b"hash_seed"));
    let mut ids = Ids { uuid, hash_seed, now, journal_iblock: [0; 15] };

    // Inodes of the root, lost+found and the journal.
    let (uid, gid) = opts.root_ids();
    let stub = superblock_raw(&l, &opts, &ids, 0, 0)?;
    let seed = stub.csum_seed();
    let inode_seed = |ino: u32| crc32c(crc32c(seed, &ino.to_le_bytes()), &0u32.to_le_bytes());
    let mut journal_leaf = None;
    let jblocks: u64 = l.journal.iter().map(|r| u64::from(r.1)).sum();
    let journal_map = if l.block_mapped && !l.journal.is_empty() {
        Some(blockmapped(&blockmap::build(&l.journal_region, jblocks, l.block_size)?, l.block_size))
    } else {
        None
    };
    if let Some(m) = &journal_map {
        for (i, w) in ids.journal_iblock.iter_mut().enumerate() {
            *w = u32::from_le_bytes([
                m.i_block[i * 4],
                m.i_block[i * 4 + 1],
                m.i_block[i * 4 + 2],
                m.i_block[i * 4 + 3],
            ]);
        }
    } else if !l.journal.is_empty() {
        let root = extent_root(&l.journal, l.journal_leaf)?;
        for (i, w) in ids.journal_iblock.iter_mut().enumerate() {
            *w = u32::from_le_bytes([root[i * 4], root[i * 4 + 1], root[i * 4 + 2], root[i * 4 + 3]]);
        }
        if let Some(lb) = l.journal_leaf {
            let mut buf = vec![0u8; bs];
            let leaf = ExtentNode::Leaf(ExtentHeader { entries: 0, max: 0, depth: 0 }, extents_of(&l.journal));
            encode_node(&leaf, &mut buf)?;
            if opts.features.metadata_csum {
                set_block_checksum(&mut buf, inode_seed(JOURNAL_INO));
            }
            journal_leaf = Some((lb, buf));
        }
    }
    let sb0 = superblock_raw(&l, &opts, &ids, 0, 0)?;
    let mut itable0: Vec<u8> = vec![0u8; l.used_inodes as usize * usize::from(l.inode_size)];
    let mut put_inode = |ino: &mut Inode| -> Result<()> {
        let raw = ino.encode(&sb0)?.to_vec();
        let off = (ino.ino as usize - 1) * usize::from(l.inode_size);
        itable0[off..off + raw.len()].copy_from_slice(&raw);
        Ok(())
    };
    for n in 1..FIRST_INO {
        if n == ROOT_INO
            || (n == JOURNAL_INO && !l.journal.is_empty())
            || (n == RESIZE_INO && l.reserved_gdt > 0)
            || l.quota.iter().flatten().any(|q| q.0 == n)
        {
            continue;
        }
        // Reserved inodes: empty, but stamped and checksummed like mke2fs's.
        let mut i = Inode::new_raw(&sb0, n);
        i.extra_isize = 0;
        i.crtime = None;
        i.atime = now;
        i.ctime = now;
        i.mtime = now;
        put_inode(&mut i)?;
    }
    let dir_inode = |ino: u32, mode: u16, links: u16, start: u64, len: u32| -> Result<Inode> {
        let mut i = Inode::new_raw(&sb0, ino);
        i.mode = S_IFDIR | mode;
        i.links_count = links;
        i.uid = uid;
        i.gid = gid;
        i.size = u64::from(len) * bs as u64;
        i.blocks_512 = l.sectors(u64::from(len));
        let m = map_file(&l, start, len)?;
        i.flags = m.flags;
        (i.atime, i.ctime, i.mtime, i.crtime) = (now, now, now, Some(now));
        i.block = m.i_block;
        Ok(i)
    };
    let mut root = dir_inode(ROOT_INO, 0o755, 3, l.root_block, 1)?;
    put_inode(&mut root)?;
    let mut lpf = dir_inode(LPF_INO, 0o700, 2, l.lpf.0, l.lpf.1)?;
    lpf.uid = 0;
    lpf.gid = 0;
    put_inode(&mut lpf)?;
    if !l.journal.is_empty() {
        let mut j = Inode::new_raw(&sb0, JOURNAL_INO);
        j.mode = S_IFREG | 0o600;
        j.links_count = 1;
        j.size = jblocks * bs as u64;
        j.blocks_512 = l.sectors(jblocks) + if journal_leaf.is_some() { l.sectors(1) } else { 0 };
        (j.atime, j.ctime, j.mtime, j.crtime) = (now, now, now, Some(now));
        if let Some(m) = &journal_map {
            j.flags = 0;
            j.block = m.i_block;
        } else {
            j.flags = FL_EXTENTS;
            j.block = extent_root(&l.journal, l.journal_leaf)?;
        }
        put_inode(&mut j)?;
    }
    // Indirect blocks of the block-mapped files, written with the data.
    let mut indirect: RawBlocks = journal_map.as_ref().map(|m| m.indirect.clone()).unwrap_or_default();
    if l.reserved_gdt > 0 {
        let (mut r, blocks) = resize_inode(&l, &sb0)?;
        (r.atime, r.ctime, r.mtime, r.crtime) = (now, now, now, Some(now));
        put_inode(&mut r)?;
        indirect.extend(blocks);
    }
    let mut orphan_data = Vec::new();
    if l.orphan.1 > 0 {
        // Like mke2fs's: root's, generation 0, no links from any directory.
        let mut o = Inode::new_raw(&sb0, l.orphan_ino);
        o.mode = S_IFREG | 0o600;
        o.links_count = 1;
        o.size = u64::from(l.orphan.1) * bs as u64;
        o.blocks_512 = l.sectors(u64::from(l.orphan.1));
        let m = map_file(&l, l.orphan.0, l.orphan.1)?;
        o.flags = m.flags;
        (o.atime, o.ctime, o.mtime, o.crtime) = (now, now, now, Some(now));
        o.block = m.i_block;
        put_inode(&mut o)?;
        indirect.extend(m.indirect);
        orphan_data = m.data;
    }

    for ty in QuotaType::ALL {
        let Some((ino, start, n)) = l.quota[ty.index()] else { continue };
        // Like mke2fs's: root's, immutable, no links from any directory.
        let data = l.quota_file(ty);
        let mut q = Inode::new_raw(&sb0, ino);
        q.mode = S_IFREG | 0o600;
        q.links_count = 1;
        q.size = data.len() as u64;
        q.blocks_512 = l.sectors(u64::from(n));
        let m = map_file(&l, start, n)?;
        q.flags = m.flags | FL_IMMUTABLE;
        (q.atime, q.ctime, q.mtime, q.crtime) = (now, now, now, Some(now));
        q.block = m.i_block;
        put_inode(&mut q)?;
        let mut buf = data.to_vec();
        buf.resize(n as usize * bs, 0);
        let blocks = m.data.iter().flat_map(|&(s, len)| s..s + u64::from(len));
        for (b, chunk) in blocks.zip(buf.chunks(bs)) {
            w.block(b, chunk)?;
        }
        indirect.extend(m.indirect);
    }

    if l.mmp_block != 0 {
        // Clean, as mke2fs leaves it; no host name in a reproducible image.
        let m = Mmp {
            seq: mmp::SEQ_CLEAN,
            time: now.sec.max(0) as u64,
            nodename: mmp::name_field(&if opts.time.is_some() { Vec::new() } else { nodename() }),
            bdevname: [0; 32],
            check_interval: opts.mmp_update_interval,
        };
        let mut b = vec![0u8; bs];
        m.encode(&mut b, opts.features.metadata_csum.then_some(seed));
        w.block(l.mmp_block, &b)?;
    }

    // Orphan file blocks: no slot taken, a sealed tail each.
    let csum = opts.features.metadata_csum;
    let orphan_seed = csum.then(|| inode_seed(l.orphan_ino));
    for p in orphan_data.iter().flat_map(|&(s, len)| s..s + u64::from(len)) {
        let mut b = vec![0u8; bs];
        orphan_file::seal(&mut b, p, orphan_seed);
        w.block(p, &b)?;
    }

    // Directory blocks.
    let end = if csum { bs - 12 } else { bs };
    let mut rb = vec![0u8; bs];
    write_entry(&mut rb, 0, ROOT_INO, 12, b".", file_type_of(S_IFDIR), true);
    write_entry(&mut rb, 12, ROOT_INO, 12, b"..", file_type_of(S_IFDIR), true);
    write_entry(&mut rb, 24, LPF_INO, end - 24, b"lost+found", file_type_of(S_IFDIR), true);
    if csum {
        write_tail(&mut rb);
        set_leaf_checksum(&mut rb, inode_seed(ROOT_INO));
    }
    w.block(l.root_block, &rb)?;
    for k in 0..l.lpf.1 {
        let mut b = vec![0u8; bs];
        if k == 0 {
            write_entry(&mut b, 0, LPF_INO, 12, b".", file_type_of(S_IFDIR), true);
            write_entry(&mut b, 12, ROOT_INO, end - 12, b"..", file_type_of(S_IFDIR), true);
        } else {
            write_entry(&mut b, 0, 0, end, b"", 0, true);
        }
        if csum {
            write_tail(&mut b);
            set_leaf_checksum(&mut b, inode_seed(LPF_INO));
        }
        w.block(l.lpf.0 + u64::from(k), &b)?;
    }
    if let Some((lb, buf)) = &journal_leaf {
        w.block(*lb, buf)?;
    }
    for (b, raw) in &indirect {
        w.block(*b, raw)?;
    }
    if !l.journal.is_empty() {
        let jsb = journal_superblock(l.block_size, jblocks as u32, l.fc_blocks, &ids.uuid);
        w.block(l.journal[0].0, &jsb)?;
        if !zeroed {
            let zero = vec![0u8; bs];
            for &(s, n) in &l.journal {
                for b in s..s + u64::from(n) {
                    if b != l.journal[0].0 {
                        w.block(b, &zero)?;
                    }
                }
            }
        }
    }

    // Bitmaps, inode tables and descriptors.
    let ipg = l.inodes_per_group;
    let mut descs = Vec::with_capacity(l.groups as usize);
    let mut total_free = 0u64;
    let mut total_free_inodes = 0u64;
    // Without group descriptor checksums (ext2/ext3 as mke2fs makes them)
    // no group may be left uninitialised: every bitmap is written.
    let group_csum = csum || opts.features.uninit_bg;
    let ratio = l.cluster_ratio;
    for g in 0..l.groups {
        let m = l.meta[g as usize];
        // Bitmaps and free counts are in clusters (blocks without bigalloc).
        let n = l.group_clusters(g);
        let runs = l.used_runs_in_group(g);
        let used: u32 = runs.iter().map(|r| r.1).sum();
        let free = n - used;
        total_free += u64::from(free) * u64::from(ratio);
        let used_inodes = if g == 0 { l.used_inodes } else { 0 };
        total_free_inodes += u64::from(ipg - used_inodes);
        // Only a superblock backup in it: leave the bitmap uninitialised.
        let block_uninit = group_csum && g != 0 && g + 1 != l.groups && used == l.super_blocks(g).div_ceil(ratio);
        let mut gd = GroupDesc {
            block_bitmap: m.block_bitmap,
            inode_bitmap: m.inode_bitmap,
            inode_table: m.inode_table,
            free_blocks_count: free,
            free_inodes_count: ipg - used_inodes,
            used_dirs_count: if g == 0 { 2 } else { 0 },
            flags: 0,
            exclude_bitmap: 0,
            block_bitmap_csum: 0,
            inode_bitmap_csum: 0,
            itable_unused: if group_csum { ipg - used_inodes } else { 0 },
            checksum: 0,
        };
        if zeroed && group_csum {
            gd.flags |= BG_INODE_ZEROED;
        }
        if block_uninit {
            gd.flags |= BG_BLOCK_UNINIT;
        } else {
            // Bits past the group's clusters stay set; the used runs are
            // set from the layout's runs (no per-cluster lookups).
            let mut bm = vec![0xFFu8; bs];
            bm[..(n / 8) as usize].fill(0);
            for i in n / 8 * 8..n {
                bm[(i / 8) as usize] &= !(1 << (i % 8));
            }
            for &(s, len) in &runs {
                for i in s..s + len {
                    bm[(i / 8) as usize] |= 1 << (i % 8);
                }
            }
            if csum {
                gd.block_bitmap_csum = crc32c(seed, &bm[..(l.blocks_per_group / ratio / 8) as usize]);
            }
            w.block(m.block_bitmap, &bm)?;
        }
        if used_inodes == 0 && group_csum {
            gd.flags |= BG_INODE_UNINIT;
        } else {
            let mut ib = vec![0u8; bs];
            for i in 0..used_inodes {
                ib[(i / 8) as usize] |= 1 << (i % 8);
            }
            for i in ipg..(bs as u32 * 8) {
                ib[(i / 8) as usize] |= 1 << (i % 8);
            }
            if csum {
                gd.inode_bitmap_csum = crc32c(seed, &ib[..(ipg / 8) as usize]);
            }
            w.block(m.inode_bitmap, &ib)?;
        }
        if g == 0 {
            // The first inode table block(s) hold inodes 1..=11.
            let mut t = vec![0u8; itable0.len().div_ceil(bs) * bs];
            t[..itable0.len()].copy_from_slice(&itable0);
            for (k, chunk) in t.chunks(bs).enumerate() {
                w.block(m.inode_table + k as u64, chunk)?;
            }
        }
        if !zeroed && (g == 0 || !group_csum) {
            // Without checksums the kernel trusts every table as written.
            let zero = vec![0u8; bs];
            let first = if g == 0 { itable0.len().div_ceil(bs) as u64 } else { 0 };
            for k in first..u64::from(l.itable_blocks) {
                w.block(m.inode_table + k, &zero)?;
            }
        }
        descs.push(gd);
    }
    let sb = superblock_raw(&l, &opts, &ids, total_free, total_free_inodes as u32)?;
    let mut gdt = vec![0u8; l.gdt_blocks as usize * bs];
    let ds = l.desc_size as usize;
    for (g, gd) in descs.iter().enumerate() {
        let off = g * ds;
        gd.encode(&sb, g as u32, &mut gdt[off..off + ds]);
    }
    for g in 0..l.groups {
        if !l.has_super(g) {
            continue;
        }
        let start = l.super_start(g);
        let mut copy = sb.clone();
        copy.set_block_group_nr(g as u16);
        if g == 0 {
            dev.write_at(copy.raw(), SUPERBLOCK_OFFSET)?;
        } else {
            // Backups sit at the start of their group's first block.
            let mut blk = vec![0u8; bs];
            blk[..SUPERBLOCK_SIZE].copy_from_slice(copy.raw());
            w.block(start, &blk)?;
        }
        let gdt_start = if g == 0 { SUPERBLOCK_OFFSET / bs as u64 + 1 } else { start + 1 };
        for (k, chunk) in gdt.chunks(bs).enumerate() {
            w.block(gdt_start + k as u64, chunk)?;
        }
        if g != 0 && !zeroed {
            // The backups of the reserved descriptor blocks start empty.
            let zero = vec![0u8; bs];
            for k in 0..u64::from(l.reserved_gdt) {
                w.block(gdt_start + u64::from(l.gdt_blocks) + k, &zero)?;
            }
        }
    }
    dev.flush()?;
    Ok(l)
}
