//! The etcd key layout under `/rollcall/<cluster>/` (see the module documentation).

/// Key names of one cluster.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
}

impl Keys {
    pub(crate) fn new(cluster: &str) -> Self {
        Self {
            prefix: format!("/rollcall/{cluster}/"),
        }
    }

    pub(crate) fn meta_slots(&self) -> String {
        format!("{}meta/slots", self.prefix)
    }

    pub(crate) fn coordinators_prefix(&self) -> String {
        format!("{}coordinators/", self.prefix)
    }

    pub(crate) fn coordinator(&self, id: &str) -> String {
        format!("{}coordinators/{id}", self.prefix)
    }

    pub(crate) fn owners_prefix(&self) -> String {
        format!("{}owners/", self.prefix)
    }

    /// The first key after every `owners/` key.
    pub(crate) fn owners_end(&self) -> String {
        format!("{}owners0", self.prefix)
    }

    pub(crate) fn owner(&self, slot: u32) -> String {
        format!("{}owners/{slot:05}", self.prefix)
    }

    /// Everything the store keeps, every slot.
    pub(crate) fn slots_prefix(&self) -> String {
        format!("{}slots/", self.prefix)
    }

    /// Everything the store keeps for `slot`'s groups.
    pub(crate) fn slot(&self, slot: u32) -> String {
        format!("{}slots/{slot:05}/", self.prefix)
    }

    /// `group`'s snapshot.
    pub(crate) fn snapshot(&self, slot: u32, group: &str) -> String {
        format!("{}g/{}", self.slot(slot), encode(group))
    }

    /// `group`'s retention mark, floor and snapshot generation.
    pub(crate) fn info(&self, slot: u32, group: &str) -> String {
        format!("{}i/{}", self.slot(slot), encode(group))
    }

    /// The prefix of every `info` key of `slot`.
    pub(crate) fn infos(&self, slot: u32) -> String {
        format!("{}i/", self.slot(slot))
    }

    /// The prefix of every offset of `group`.
    pub(crate) fn offsets(&self, slot: u32, group: &str) -> String {
        format!("{}o/{}/", self.slot(slot), encode(group))
    }

    pub(crate) fn offset(&self, slot: u32, group: &str, topic: &str, partition: u32) -> String {
        format!(
            "{}{}/{partition:010}",
            self.offsets(slot, group),
            encode(topic)
        )
    }
}

/// What a key below a slot's prefix names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum SlotKey {
    Snapshot(String),
    Info(String),
    Offset {
        group: String,
        topic: String,
        partition: u32,
    },
}

/// Parses the part of a key after `slots/<slot>/`.
pub(crate) fn parse_slot_key(rest: &str) -> Option<SlotKey> {
    let (kind, rest) = rest.split_once('/')?;
    match kind {
        "g" => Some(SlotKey::Snapshot(decode(rest)?)),
        "i" => Some(SlotKey::Info(decode(rest)?)),
        "o" => {
            let mut parts = rest.split('/');
            let group = decode(parts.next()?)?;
            let topic = decode(parts.next()?)?;
            let partition = parts.next()?.parse().ok()?;
            parts.next().is_none().then_some(SlotKey::Offset {
                group,
                topic,
                partition,
            })
        }
        _ => None,
    }
}

/// Parses a key below `slots/`: the slot and what it names.
pub(crate) fn parse_key(rest_after_slots: &str) -> Option<(u32, SlotKey)> {
    let (slot, rest) = rest_after_slots.split_once('/')?;
    Some((slot.parse().ok()?, parse_slot_key(rest)?))
}

/// Percent-encodes every byte but `A-Z a-z 0-9 - . _ ~`, so a name is one key segment.
pub(crate) fn encode(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for byte in name.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// The inverse of [`encode`]; `None` for what it cannot have written.
pub(crate) fn decode(segment: &str) -> Option<String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = segment.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}
