//! A task: a tool call that outlives the request that started it (the MCP tasks
//! extension for gateway clients, `Prefer: respond-async` on the REST API).

use std::fmt;

/// Where a task's status stands. The names are the tasks extension's, on the wire and in
/// the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl TaskStatus {
    pub const OPEN: [TaskStatus; 2] = [TaskStatus::Working, TaskStatus::InputRequired];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Working => "working",
            Self::InputRequired => "input_required",
            Self::Completed => "completed",
            Self::Failed => "failed",
            Self::Cancelled => "cancelled",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "working" => Self::Working,
            "input_required" => Self::InputRequired,
            "completed" => Self::Completed,
            "failed" => Self::Failed,
            "cancelled" => Self::Cancelled,
            _ => return None,
        })
    }

    /// Nothing moves it any more.
    pub fn is_terminal(self) -> bool {
        !Self::OPEN.contains(&self)
    }
}

impl fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which door a task came in by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskOrigin {
    Rest,
    Gateway,
    Grpc,
}

impl TaskOrigin {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rest => "rest",
            Self::Gateway => "gateway",
            Self::Grpc => "grpc",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "rest" => Self::Rest,
            "gateway" => Self::Gateway,
            "grpc" => Self::Grpc,
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_read_back_as_written() {
        for status in [
            TaskStatus::Working,
            TaskStatus::InputRequired,
            TaskStatus::Completed,
            TaskStatus::Failed,
            TaskStatus::Cancelled,
        ] {
            assert_eq!(TaskStatus::parse(status.as_str()), Some(status));
        }
        assert!(TaskStatus::Cancelled.is_terminal());
        assert!(!TaskStatus::InputRequired.is_terminal());
        assert_eq!(TaskStatus::parse("done"), None);
    }
}
