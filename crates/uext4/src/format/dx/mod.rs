//! htree (dx) index blocks: the root in directory block 0 and interior
//! nodes, each a count/limit header followed by (hash, block) entries.
//!
//! One structure per file: the root's `dx_root_info` ([`root`]), the
//! interior node's fake entry ([`node`]), the count/limit header and
//! entries both share ([`entries`]), and the metadata_csum tail
//! ([`tail`]); the offsets and sizes all of them use are in one place
//! ([`layout`]). Everything is re-exported here.

pub mod entries;
pub mod layout;
pub mod node;
pub mod root;
pub mod tail;

pub use entries::*;
pub use layout::*;
pub use node::*;
pub use root::*;
pub use tail::*;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_parse_round_trip() {
        for (bs, csum) in [(1024usize, true), (1024, false), (4096, true), (65536, true)] {
            let mut b = vec![0u8; bs];
            write_node_header(&mut b);
            assert!(is_node_block(&b));
            let limit = node_limit(bs, csum);
            let entries: Vec<DxEntry> =
                (0..5u32).map(|i| DxEntry { hash: if i == 0 { 0 } else { i * 100 + 1 }, block: i + 1 }).collect();
            write_entries(&mut b, NODE_ENTRIES_OFFSET, limit, &entries).unwrap();
            if csum {
                set_checksum(&mut b, NODE_ENTRIES_OFFSET, 0x1234);
            }
            let n = parse_node(&b, false, csum, 7).unwrap();
            assert_eq!(n.entries, entries);
            assert_eq!(n.limit, limit);
            if csum {
                verify_checksum(&b, &n, 0x1234, 7).unwrap();
                assert!(verify_checksum(&b, &n, 0x1235, 7).is_err());
            }
            let mut r = vec![0u8; bs];
            write_root_info(&mut r, 1, 1);
            write_entries(&mut r, ROOT_ENTRIES_OFFSET, root_limit(bs, csum), &entries[..2]).unwrap();
            let info = parse_root_info(&r, 0).unwrap();
            assert_eq!((info.hash_version, info.indirect_levels), (1, 1));
            assert_eq!(parse_node(&r, true, csum, 0).unwrap().entries, entries[..2].to_vec());
            assert!(write_entries(&mut r, ROOT_ENTRIES_OFFSET, 1, &entries).is_err());
        }
    }
}
