//! AlterGroupConfig (API key 15): read or change a group's operator settings (departure
//! delay, revocation caps, balance, churn budget, imbalance threshold).

use bytes::{BufMut, BytesMut};

use crate::wire::{put_string, Reader};
use crate::{DecodeError, EncodeError};

/// A group's operator settings as the wire carries them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GroupSettings {
    /// How long a departed static member's partitions stay reserved for its instance,
    /// milliseconds (0: off).
    pub departure_delay_ms: u32,
    /// At most this many partitions in revocation at once in the group (0: no cap).
    pub max_revoking: u32,
    /// At most this many partitions in revocation at once per member (0: no cap).
    pub max_revoking_per_member: u32,
    /// What the assignor balances: 0 partition counts, 1 reported load.
    pub balance: u8,
    /// Load balance: the share of partitions a rebalance may move beyond those that
    /// must move, per mille.
    pub churn_budget_permille: u16,
    /// Load balance: how far above the mean (per mille) the most loaded member must be
    /// before a load report rebalances.
    pub imbalance_permille: u16,
}

impl GroupSettings {
    /// Encoded size, bytes.
    pub const SIZE: usize = 4 * 3 + 1 + 2 * 2;

    pub(crate) fn encode(&self, buf: &mut BytesMut) {
        buf.put_u32(self.departure_delay_ms);
        buf.put_u32(self.max_revoking);
        buf.put_u32(self.max_revoking_per_member);
        buf.put_u8(self.balance);
        buf.put_u16(self.churn_budget_permille);
        buf.put_u16(self.imbalance_permille);
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            departure_delay_ms: r.u32("departure delay")?,
            max_revoking: r.u32("max revoking")?,
            max_revoking_per_member: r.u32("max revoking per member")?,
            balance: r.u8("balance")?,
            churn_budget_permille: r.u16("churn budget")?,
            imbalance_permille: r.u16("imbalance")?,
        })
    }
}

/// Which settings an AlterGroupConfig request sets; each `None` is left as it is. With
/// none set, the request only reads the settings.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlterGroupConfigRequest {
    /// The group (created, empty, if it does not exist and the request sets something).
    pub group: String,
    /// Bit 0x01.
    pub departure_delay_ms: Option<u32>,
    /// Bit 0x02.
    pub max_revoking: Option<u32>,
    /// Bit 0x04.
    pub max_revoking_per_member: Option<u32>,
    /// Bit 0x08: 0 count, 1 load (anything else is refused by the coordinator).
    pub balance: Option<u8>,
    /// Bit 0x10.
    pub churn_budget_permille: Option<u16>,
    /// Bit 0x20.
    pub imbalance_permille: Option<u16>,
}

impl AlterGroupConfigRequest {
    /// The bits a request may set.
    pub const ALL_BITS: u8 = 0x3f;

    /// The bitmask of the settings present.
    pub fn set_mask(&self) -> u8 {
        u8::from(self.departure_delay_ms.is_some())
            | u8::from(self.max_revoking.is_some()) << 1
            | u8::from(self.max_revoking_per_member.is_some()) << 2
            | u8::from(self.balance.is_some()) << 3
            | u8::from(self.churn_budget_permille.is_some()) << 4
            | u8::from(self.imbalance_permille.is_some()) << 5
    }

    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        put_string(buf, &self.group)?;
        buf.put_u8(self.set_mask());
        if let Some(v) = self.departure_delay_ms {
            buf.put_u32(v);
        }
        if let Some(v) = self.max_revoking {
            buf.put_u32(v);
        }
        if let Some(v) = self.max_revoking_per_member {
            buf.put_u32(v);
        }
        if let Some(v) = self.balance {
            buf.put_u8(v);
        }
        if let Some(v) = self.churn_budget_permille {
            buf.put_u16(v);
        }
        if let Some(v) = self.imbalance_permille {
            buf.put_u16(v);
        }
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let group = r.string("group")?;
        let set = r.u8("set")?;
        if set & !Self::ALL_BITS != 0 {
            return Err(DecodeError::Invalid {
                what: "set",
                reason: "unknown setting bit (only 0x01 to 0x20 are defined)",
            });
        }
        let bit = |b: u8| set & b != 0;
        Ok(Self {
            group,
            departure_delay_ms: bit(0x01).then(|| r.u32("departure delay")).transpose()?,
            max_revoking: bit(0x02).then(|| r.u32("max revoking")).transpose()?,
            max_revoking_per_member: bit(0x04)
                .then(|| r.u32("max revoking per member"))
                .transpose()?,
            balance: bit(0x08).then(|| r.u8("balance")).transpose()?,
            churn_budget_permille: bit(0x10).then(|| r.u16("churn budget")).transpose()?,
            imbalance_permille: bit(0x20).then(|| r.u16("imbalance")).transpose()?,
        })
    }
}

/// The answer to AlterGroupConfig: the group's settings after the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AlterGroupConfigResponse {
    /// The settings.
    pub config: GroupSettings,
}

impl AlterGroupConfigResponse {
    pub(crate) fn encode(&self, buf: &mut BytesMut) -> Result<(), EncodeError> {
        self.config.encode(buf);
        Ok(())
    }

    pub(crate) fn decode(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            config: GroupSettings::decode(r)?,
        })
    }
}
