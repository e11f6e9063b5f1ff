//! Round trips and rejections of every journal codec, in every tag format.

use super::*;
use crate::error::Error;

fn feats(compat: u32, incompat: u32) -> JournalFeatures {
    JournalFeatures { compat, incompat, ro_compat: 0 }
}

const V3_64: u32 = feature::INCOMPAT_CSUM_V3 | feature::INCOMPAT_64BIT | feature::INCOMPAT_REVOKE;

#[test]
fn crc32_be_matches_standard_vector() {
    // CRC-32/MPEG-2 ("123456789") = 0x0376E6E7: init ~0, MSB first, no xorout.
    assert_eq!(crc32_be(!0, b"123456789"), 0x0376_E6E7);
    assert_eq!(crc32_be(!0, b""), !0);
}

#[test]
fn tag_bytes_match_the_kernel() {
    use super::feature::*;
    assert_eq!(feats(0, 0).tag_bytes(), 8);
    assert_eq!(feats(0, INCOMPAT_64BIT).tag_bytes(), 12);
    assert_eq!(feats(0, INCOMPAT_CSUM_V2).tag_bytes(), 10);
    assert_eq!(feats(0, INCOMPAT_CSUM_V2 | INCOMPAT_64BIT).tag_bytes(), 14);
    assert_eq!(feats(0, INCOMPAT_CSUM_V3).tag_bytes(), 16);
    assert_eq!(feats(0, INCOMPAT_CSUM_V3 | INCOMPAT_64BIT).tag_bytes(), 16);
    assert_eq!(feats(COMPAT_CHECKSUM, 0).tag_bytes(), 8);
}

#[test]
fn feature_names() {
    let f = JournalFeatures { compat: 1, incompat: V3_64 | 0x100, ro_compat: 2 };
    assert_eq!(
        f.names(),
        vec![
            "journal_checksum",
            "journal_incompat_revoke",
            "journal_64bit",
            "journal_checksum_v3",
            "FEATURE_I8",
            "FEATURE_R1"
        ]
    );
}

#[test]
fn header_round_trip() {
    let mut b = [0u8; 12];
    let h = BlockHeader::new(blocktype::REVOKE, 0xdead_beef);
    h.encode(&mut b);
    assert_eq!(b[..4], [0xC0, 0x3B, 0x39, 0x98]);
    assert_eq!(BlockHeader::parse(&b), Some(h));
    assert_eq!(BlockHeader::parse(&b[..11]), None);
}

fn sample_sb(features: JournalFeatures) -> JournalSuperblock {
    let mut sb = JournalSuperblock::new_v2(4096, 2048, 1, 7, features, [7; 16]);
    sb.start = 5;
    sb.errno = -5;
    sb.num_fc_blocks = 0;
    sb.head = 9;
    sb
}

#[test]
fn superblock_round_trip_and_checksum() {
    for f in [feats(0, 0), feats(1, feature::INCOMPAT_64BIT), feats(0, V3_64), feats(0, feature::INCOMPAT_CSUM_V2)] {
        let sb = sample_sb(f);
        let b = sb.to_bytes();
        let p = JournalSuperblock::parse(&b).unwrap();
        assert_eq!(p.to_bytes(), b);
        assert_eq!((p.maxlen, p.first, p.sequence, p.start, p.errno, p.head), (2048, 1, 7, 5, -5, 9));
        assert_eq!(p.features, f);
        assert_eq!(p.uuid, [7; 16]);
        if f.csum_v2or3() {
            assert_eq!(p.checksum, superblock_checksum(&b));
            let mut bad = b;
            bad[0x1F] ^= 1;
            assert!(matches!(JournalSuperblock::parse(&bad), Err(Error::Checksum { .. })));
        }
    }
}

#[test]
fn superblock_v1_ignores_v2_fields() {
    let mut b = sample_sb(feats(0, V3_64)).to_bytes();
    put_be32(&mut b, 4, blocktype::SUPERBLOCK_V1);
    let p = JournalSuperblock::parse(&b).unwrap();
    assert!(!p.is_v2());
    assert_eq!(p.features, JournalFeatures::default());
    assert_eq!(JournalSuperblock::parse(&p.to_bytes()).unwrap().start, 5);
}

#[test]
fn superblock_rejects_bad_geometry_and_features() {
    let base = sample_sb(feats(0, feature::INCOMPAT_64BIT));
    let check = |f: &dyn Fn(&mut JournalSuperblock)| {
        let mut s = base.clone();
        f(&mut s);
        JournalSuperblock::parse(&s.to_bytes())
    };
    assert!(check(&|_| {}).is_ok());
    assert!(matches!(check(&|s| s.first = 0), Err(Error::Corrupt { .. })));
    assert!(matches!(check(&|s| s.first = 4000), Err(Error::Corrupt { .. })));
    assert!(matches!(check(&|s| s.start = 2048), Err(Error::Corrupt { .. })));
    assert!(matches!(check(&|s| s.maxlen = 100), Err(Error::Corrupt { .. })));
    assert!(matches!(check(&|s| s.block_size = 3000), Err(Error::Corrupt { .. })));
    assert!(matches!(check(&|s| s.features.incompat |= 0x40), Err(Error::Unsupported(_))));
    assert!(matches!(check(&|s| s.features.ro_compat |= 1), Err(Error::Unsupported(_))));
    assert!(matches!(
        check(&|s| s.features.incompat |= feature::INCOMPAT_CSUM_V2 | feature::INCOMPAT_CSUM_V3),
        Err(Error::Corrupt { .. })
    ));
    let mut b = base.to_bytes();
    put_be32(&mut b, 4, blocktype::COMMIT);
    assert!(matches!(JournalSuperblock::parse(&b), Err(Error::Corrupt { .. })));
    put_be32(&mut b, 4, 9);
    assert!(matches!(JournalSuperblock::parse(&b), Err(Error::Unsupported(_))));
    put_be32(&mut b, 0, 0);
    assert!(matches!(JournalSuperblock::parse(&b), Err(Error::Corrupt { .. })));
    assert!(JournalSuperblock::parse(&b[..100]).is_err());
}

#[test]
fn fast_commit_area_takes_the_end() {
    let mut sb = sample_sb(feats(0, feature::INCOMPAT_FAST_COMMIT));
    assert_eq!(sb.log_end(), 2048 - 256);
    sb.num_fc_blocks = 100;
    assert_eq!(sb.log_end(), 1948);
    sb.maxlen = 1050;
    assert_eq!(sb.log_end(), 1050);
}

fn all_formats() -> Vec<JournalFeatures> {
    use super::feature::*;
    vec![
        feats(0, 0),
        feats(0, INCOMPAT_64BIT),
        feats(COMPAT_CHECKSUM, 0),
        feats(0, INCOMPAT_CSUM_V2),
        feats(0, INCOMPAT_CSUM_V2 | INCOMPAT_64BIT),
        feats(0, INCOMPAT_CSUM_V3),
        feats(0, INCOMPAT_CSUM_V3 | INCOMPAT_64BIT),
    ]
}

#[test]
fn descriptor_round_trip_in_every_format() {
    let seed = journal_csum_seed(&[3; 16]);
    for f in all_formats() {
        for bs in [1024usize, 4096] {
            let cap = descriptor_capacity(bs, &f);
            let big = if f.has_64bit() { 1u64 << 40 } else { 0 };
            let mut tags: Vec<BlockTag> = (0..cap)
                .map(|i| BlockTag {
                    block: big + 1000 + i as u64,
                    flags: if i == 0 { tag_flag::ESCAPE } else { tag_flag::SAME_UUID },
                    checksum: if f.csum_v3() {
                        0x1234_5678 + i as u32
                    } else if f.csum_v2() {
                        0xBEEF
                    } else {
                        0
                    },
                    uuid: if i == 0 { Some([9; 16]) } else { None },
                })
                .collect();
            tags.last_mut().unwrap().flags |= tag_flag::LAST_TAG;
            let mut buf = vec![0u8; bs];
            encode_descriptor(&mut buf, 42, &tags, &f, seed).unwrap();
            let h = BlockHeader::parse(&buf).unwrap();
            assert_eq!((h.blocktype, h.sequence), (blocktype::DESCRIPTOR, 42));
            assert_eq!(parse_tags(&buf, &f), tags, "{f:?} {bs}");
            if f.csum_v2or3() {
                assert!(verify_tail_checksum(seed, &buf));
                buf[20] ^= 1;
                assert!(!verify_tail_checksum(seed, &buf));
            }
            // One tag more does not fit.
            let mut more = tags.clone();
            more.push(BlockTag { block: 1, flags: tag_flag::SAME_UUID, checksum: 0, uuid: None });
            assert!(encode_descriptor(&mut buf, 42, &more, &f, seed).is_err());
        }
    }
}

#[test]
fn parse_tags_without_last_tag_stops_at_the_block_end() {
    let f = feats(0, V3_64);
    let mut buf = vec![0u8; 1024];
    BlockHeader::new(blocktype::DESCRIPTOR, 1).encode(&mut buf);
    // All-zero tags: no SAME_UUID, so each takes 16 + 16 bytes.
    let tags = parse_tags(&buf, &f);
    assert_eq!(tags.len(), (1024 - 12 - 4) / 32 + usize::from((1024 - 12 - 4) % 32 >= 16));
    assert!(parse_tags(&buf[..10], &f).is_empty());
}

#[test]
fn data_tag_checksums() {
    let seed = journal_csum_seed(&[1; 16]);
    let data = vec![0x5Au8; 4096];
    let full = data_block_checksum(seed, 77, &data);
    let v3 = feats(0, feature::INCOMPAT_CSUM_V3);
    let v2 = feats(0, feature::INCOMPAT_CSUM_V2);
    let tag = |c| BlockTag { block: 1, flags: 0, checksum: c, uuid: None };
    assert!(verify_tag_checksum(&v3, &tag(full), seed, 77, &data));
    assert!(!verify_tag_checksum(&v3, &tag(full), seed, 78, &data));
    assert!(verify_tag_checksum(&v2, &tag(full & 0xFFFF), seed, 77, &data));
    assert!(!verify_tag_checksum(&v2, &tag(full), seed, 77, &data) || full <= 0xFFFF);
    assert!(verify_tag_checksum(&feats(0, 0), &tag(0), seed, 77, &data));
}

#[test]
fn escape_round_trip() {
    let mut d = vec![0u8; 1024];
    d[..4].copy_from_slice(&JBD2_MAGIC.to_be_bytes());
    d[4] = 7;
    let orig = d.clone();
    assert!(escape_block(&mut d));
    assert_eq!(&d[..5], &[0, 0, 0, 0, 7]);
    unescape_block(&mut d);
    assert_eq!(d, orig);
    let mut plain = vec![1u8; 16];
    assert!(!escape_block(&mut plain));
}

#[test]
fn commit_round_trip_and_checksums() {
    let seed = journal_csum_seed(&[4; 16]);
    let c = CommitBlock {
        sequence: 9,
        chksum_type: checksum_type::CRC32,
        chksum_size: 4,
        chksum: [1, 2, 3, 4, 5, 6, 7, 8],
        commit_sec: 1_700_000_000,
        commit_nsec: 123,
    };
    for f in all_formats() {
        let mut buf = vec![0xEEu8; 4096];
        c.encode(&mut buf, &f, seed).unwrap();
        let p = CommitBlock::parse(&buf).unwrap();
        if f.csum_v2or3() {
            assert_eq!(p.chksum[0], commit_checksum(seed, &buf));
            assert_eq!(CommitBlock { chksum: [p.chksum[0], 2, 3, 4, 5, 6, 7, 8], ..c }, p);
            assert!(verify_commit_checksum(&f, seed, &buf));
            // A torn tail is accepted as an incomplete commit block.
            buf[3000] = 1;
            assert!(verify_commit_checksum(&f, seed, &buf));
            // A damaged header is not.
            buf[0x31] ^= 1;
            assert!(!verify_commit_checksum(&f, seed, &buf));
        } else {
            assert_eq!(p, c);
            assert!(verify_commit_checksum(&f, seed, &buf));
        }
    }
    let mut buf = vec![0u8; 1024];
    BlockHeader::new(blocktype::DESCRIPTOR, 1).encode(&mut buf);
    assert!(CommitBlock::parse(&buf).is_err());
    assert!(CommitBlock::parse(&buf[..20]).is_err());
}

#[test]
fn revoke_round_trip() {
    let seed = journal_csum_seed(&[5; 16]);
    for f in all_formats() {
        for bs in [1024usize, 4096] {
            let cap = revoke_capacity(bs, &f);
            let big = if f.has_64bit() { 1u64 << 33 } else { 0 };
            let r = RevokeBlock { sequence: 3, records: (0..cap as u64).map(|i| big + i * 3).collect() };
            let mut buf = vec![0u8; bs];
            r.encode(&mut buf, &f, seed).unwrap();
            assert_eq!(RevokeBlock::parse(&buf, &f).unwrap(), r);
            if f.csum_v2or3() {
                assert!(verify_tail_checksum(seed, &buf));
            }
            let mut more = r.clone();
            more.records.push(1);
            assert!(more.encode(&mut buf, &f, seed).is_err());
        }
    }
    let f = feats(0, 0);
    let r = RevokeBlock { sequence: 1, records: vec![1 << 32] };
    assert!(r.encode(&mut [0u8; 1024], &f, 0).is_err());
}

#[test]
fn revoke_rejects_huge_count() {
    let f = feats(0, V3_64);
    let mut buf = vec![0u8; 1024];
    RevokeBlock { sequence: 1, records: vec![5] }.encode(&mut buf, &f, 0).unwrap();
    put_be32(&mut buf, 12, 1021);
    assert!(RevokeBlock::parse(&buf, &f).is_err());
    put_be32(&mut buf, 12, u32::MAX);
    assert!(RevokeBlock::parse(&buf, &f).is_err());
    // Counts below the header give no records.
    put_be32(&mut buf, 12, 3);
    assert!(RevokeBlock::parse(&buf, &f).unwrap().records.is_empty());
}

#[test]
fn parsers_survive_garbage() {
    let mut x = 0x1234_5678_9abc_def0u64;
    for len in [0usize, 1, 11, 12, 59, 60, 1024, 4096] {
        for _ in 0..50 {
            let buf: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            for f in all_formats() {
                let _ = parse_tags(&buf, &f);
                let _ = RevokeBlock::parse(&buf, &f);
                let _ = verify_commit_checksum(&f, 1, &buf);
            }
            let _ = CommitBlock::parse(&buf);
            let _ = JournalSuperblock::parse(&buf);
            let _ = verify_tail_checksum(1, &buf);
            let _ = commit_partial_checksum(1, &buf);
        }
    }
}
