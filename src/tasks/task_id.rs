//! The gateway task id a caller sees ([`TaskId`]).

use crate::instance::InstanceId;

/// A gateway task id as a caller sees it: `task-`, the box's instance id
/// ([`crate::instance`]), `.`, 36 lowercase hex digits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TaskId {
    pub(super) instance: InstanceId,
    pub(super) secret: [u8; 16],
    pub(super) slot: u16,
}

const PREFIX: &str = "task-";

impl TaskId {
    /// The wire form.
    pub fn to_wire(&self) -> String {
        let mut s = String::with_capacity(PREFIX.len() + 17 + 36);
        s.push_str(PREFIX);
        crate::instance::write_id(&mut s, self.instance, &self.secret, self.slot);
        s
    }

    /// Parses a caller's `taskId`; `None` for anything [`TaskId::to_wire`]
    /// (of any box) did not produce.
    pub fn parse(s: &str) -> Option<TaskId> {
        let (instance, secret, slot) = crate::instance::read_id(s.strip_prefix(PREFIX)?)?;
        Some(TaskId {
            instance,
            secret,
            slot,
        })
    }

    /// The box that handed it out.
    pub fn instance(&self) -> InstanceId {
        self.instance
    }
}
