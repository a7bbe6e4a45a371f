//! ACS control from a PCI device's config space, as sysfs' binary `config` file holds it.
//!
//! Read by hand: the need is one register (the ACS extended capability 0x000D's control word at
//! capability + 6) found by walking the extended capability list from offset 0x100. The `pcics`
//! crate decodes every capability of the space into structures; it would add a dependency for
//! a dozen lines, and like any decoder it cannot tell a short read (sysfs gives 64 bytes to
//! non-root readers) from a device without ACS, which here must never read as "off".

use ddpcheck_core::explain::platform::AcsState;

/// Where PCI Express extended configuration space starts.
const EXT_CAP_START: usize = 0x100;
/// ACS extended capability id.
const ACS_CAP_ID: u32 = 0x000D;
/// Bytes sysfs returns to a reader without CAP_SYS_ADMIN.
const UNPRIVILEGED_BYTES: usize = 64;
/// A well-formed list is far shorter; the bound stops a looping one.
const MAX_CAPS: usize = 128;

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(at..at + 4)?.try_into().ok()?))
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(at..at + 2)?.try_into().ok()?))
}

/// The ACS state of a bridge from its config bytes.
pub fn acs_from_config(bytes: &[u8]) -> AcsState {
    if bytes.len() <= UNPRIVILEGED_BYTES {
        return AcsState::NeedsRoot;
    }
    if bytes.len() <= EXT_CAP_START {
        return AcsState::Unknown {
            why: format!(
                "{} bytes of config space: no PCIe extended space to read",
                bytes.len()
            ),
        };
    }
    let mut at = EXT_CAP_START;
    for _ in 0..MAX_CAPS {
        let Some(head) = u32_at(bytes, at) else {
            return AcsState::Unknown {
                why: format!("extended capability at {at:#x} past the end"),
            };
        };
        if head == 0 || head == u32::MAX {
            return AcsState::NotPresent;
        }
        if head & 0xffff == ACS_CAP_ID {
            let Some(ctl) = u16_at(bytes, at + 6) else {
                return AcsState::Unknown {
                    why: "ACS control register past the end".into(),
                };
            };
            let bit = |n: u16| ctl & (1 << n) != 0;
            return AcsState::Read {
                source_validation: bit(0),
                p2p_request_redirect: bit(2),
                p2p_completion_redirect: bit(3),
                upstream_forwarding: bit(4),
            };
        }
        let next = ((head >> 20) & 0xffc) as usize;
        if next == 0 {
            return AcsState::NotPresent;
        }
        if next < EXT_CAP_START {
            return AcsState::Unknown {
                why: format!("extended capability list points back to {next:#x}"),
            };
        }
        at = next;
    }
    AcsState::Unknown {
        why: "extended capability list does not end".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 4 KiB of config space with extended capabilities (id, offset) chained in order, the
    /// ACS one's control word set to `ctl`.
    pub fn space(caps: &[(u32, usize)], ctl: u16) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        for (i, &(id, off)) in caps.iter().enumerate() {
            let next =
                u32::try_from(caps.get(i + 1).map_or(0, |c| c.1)).expect("offsets fit in u32");
            let head = id | (1 << 16) | (next << 20);
            b[off..off + 4].copy_from_slice(&head.to_le_bytes());
            if id == ACS_CAP_ID {
                b[off + 6..off + 8].copy_from_slice(&ctl.to_le_bytes());
            }
        }
        b
    }

    #[test]
    fn finds_acs_down_the_list() {
        // AER at 0x100, then ACS at 0x148 with SrcValid, ReqRedir, CmpltRedir, UpstreamFwd.
        let b = space(&[(0x0001, 0x100), (ACS_CAP_ID, 0x148)], 0x001d);
        assert_eq!(
            acs_from_config(&b),
            AcsState::Read {
                source_validation: true,
                p2p_request_redirect: true,
                p2p_completion_redirect: true,
                upstream_forwarding: true,
            }
        );
        let off = space(&[(ACS_CAP_ID, 0x100)], 0);
        assert!(!acs_from_config(&off).redirects_p2p());
        assert!(matches!(acs_from_config(&off), AcsState::Read { .. }));
    }

    #[test]
    fn short_or_broken_spaces_are_never_off() {
        assert_eq!(acs_from_config(&[0u8; 64]), AcsState::NeedsRoot);
        assert!(matches!(
            acs_from_config(&[0u8; 256]),
            AcsState::Unknown { .. }
        ));
        assert_eq!(
            acs_from_config(&space(&[(0x0001, 0x100)], 0)),
            AcsState::NotPresent
        );
        // A list that points back into itself ends, unread.
        let mut b = space(&[(0x0001, 0x100)], 0);
        let head: u32 = 0x0001 | (0x100 << 20);
        b[0x100..0x104].copy_from_slice(&head.to_le_bytes());
        assert!(matches!(acs_from_config(&b), AcsState::Unknown { .. }));
    }
}
