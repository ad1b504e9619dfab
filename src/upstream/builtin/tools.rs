//! The built-in tools as data: one [`ToolSpec`] per tool, rendered to the
//! `Tool` objects of `tools/list` (`../shared/spec/2025-11-25/schema.json`
//! `Tool`: `name`, `title`, `description`, `inputSchema`, `outputSchema`,
//! `annotations`).

use serde_json::{json, Map, Value};

/// One tool of the `edge` upstream.
pub(super) struct ToolSpec {
    /// Its name (matches `[A-Za-z0-9_-]{1,64}`).
    pub name: &'static str,
    /// Its human-readable title.
    pub title: &'static str,
    /// What it reports and where from.
    pub description: &'static str,
    /// Its arguments (`inputSchema.properties`; none are required, and no
    /// other property is allowed).
    pub input: &'static [Prop],
    /// Its `structuredContent` (`outputSchema`).
    pub output: Object,
}

/// An object schema: its properties and which of them are required.
pub(super) struct Object {
    /// The properties, in order.
    pub props: &'static [Prop],
    /// Names of the required ones.
    pub required: &'static [&'static str],
}

/// One property of an object schema.
pub(super) struct Prop {
    /// Its name.
    pub name: &'static str,
    /// Its type.
    pub kind: Kind,
    /// Its `description`.
    pub description: &'static str,
}

/// The type of a [`Prop`].
pub(super) enum Kind {
    /// A number ≥ 0.
    Number,
    /// An integer ≥ the value given.
    Integer(u64),
    /// A string.
    String,
    /// A string with a `default`.
    StringDefault(&'static str),
    /// A string or `null`.
    NullableString,
    /// A number or `null`.
    NullableNumber,
    /// An array of objects.
    Array(Object),
}

const fn prop(name: &'static str, kind: Kind, description: &'static str) -> Prop {
    Prop {
        name,
        kind,
        description,
    }
}

const fn bytes(name: &'static str, description: &'static str) -> Prop {
    prop(name, Kind::Integer(0), description)
}

/// The five tools, in `tools/list` order.
pub(super) const TOOLS: [ToolSpec; 5] = [
    ToolSpec {
        name: "uptime",
        title: "Uptime",
        description: "Time since the box booted, from /proc/uptime: seconds and a human-readable string.",
        input: &[],
        output: Object {
            props: &[
                prop("seconds", Kind::Number, "Seconds since boot."),
                prop("human", Kind::String, "The same as days/hours/minutes/seconds, e.g. \"3d 4h 5m 6s\"."),
            ],
            required: &["seconds", "human"],
        },
    },
    ToolSpec {
        name: "load_average",
        title: "Load average",
        description: "1-, 5- and 15-minute load averages from /proc/loadavg, with the number of CPUs this process may use.",
        input: &[],
        output: Object {
            props: &[
                prop("load_1m", Kind::Number, "Load average over 1 minute."),
                prop("load_5m", Kind::Number, "Load average over 5 minutes."),
                prop("load_15m", Kind::Number, "Load average over 15 minutes."),
                prop("cpus", Kind::Integer(1), "CPUs available to this process (affinity and cgroup quota aware)."),
            ],
            required: &["load_1m", "load_5m", "load_15m", "cpus"],
        },
    },
    ToolSpec {
        name: "memory",
        title: "Memory",
        description: "RAM and swap from /proc/meminfo, in bytes.",
        input: &[],
        output: Object {
            props: &[
                bytes("total_bytes", "MemTotal: usable RAM."),
                bytes("available_bytes", "MemAvailable: estimate of RAM available for new work without swapping."),
                bytes("free_bytes", "MemFree: RAM not used at all."),
                bytes("swap_total_bytes", "SwapTotal."),
                bytes("swap_free_bytes", "SwapFree."),
            ],
            required: &["total_bytes", "available_bytes", "free_bytes", "swap_total_bytes", "swap_free_bytes"],
        },
    },
    ToolSpec {
        name: "disk_usage",
        title: "Disk usage",
        description: "Size and free space of the filesystem holding an absolute path (statvfs), in bytes.",
        input: &[prop(
            "path",
            Kind::StringDefault("/"),
            "Absolute path of any file or directory on the filesystem to inspect.",
        )],
        output: Object {
            props: &[
                prop("path", Kind::String, "The path that was inspected."),
                bytes("total_bytes", "Filesystem size."),
                bytes("free_bytes", "Free space, including blocks reserved for root."),
                bytes("available_bytes", "Free space available to unprivileged users."),
                bytes("used_bytes", "total_bytes - free_bytes."),
            ],
            required: &["path", "total_bytes", "free_bytes", "available_bytes", "used_bytes"],
        },
    },
    ToolSpec {
        name: "thermal",
        title: "Thermal zones",
        description: "Temperature of every thermal zone in /sys/class/thermal, in degrees Celsius. Empty (with a note) in most containers and VMs.",
        input: &[],
        output: Object {
            props: &[
                prop("zones", Kind::Array(Object {
                    props: &[
                        prop("zone", Kind::String, "Directory name, e.g. thermal_zone0."),
                        prop("type", Kind::NullableString, "Sensor type, e.g. cpu-thermal; null if unreadable."),
                        prop("celsius", Kind::NullableNumber, "Temperature in degrees Celsius; null if unreadable."),
                        prop("error", Kind::String, "Why type or celsius is null."),
                    ],
                    required: &["zone", "type", "celsius"],
                }), ""),
                prop("note", Kind::String, "Present when no zone was found."),
            ],
            required: &["zones"],
        },
    },
];

/// The `tools/list` result: every tool of [`TOOLS`] as a `Tool` object.
pub(super) fn render() -> Value {
    let tools: Vec<Value> = TOOLS.iter().map(ToolSpec::render).collect();
    json!({ "tools": tools })
}

impl ToolSpec {
    fn render(&self) -> Value {
        // Arguments are all optional: no `required`, and nothing else allowed.
        let input = json!({
            "type": "object",
            "properties": props(self.input),
            "additionalProperties": false
        });
        json!({
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputSchema": input,
            "outputSchema": self.output.render(),
            "annotations": { "readOnlyHint": true, "openWorldHint": false }
        })
    }
}

impl Object {
    fn render(&self) -> Value {
        json!({ "type": "object", "properties": props(self.props), "required": self.required })
    }
}

fn props(list: &[Prop]) -> Map<String, Value> {
    list.iter()
        .map(|p| (p.name.to_string(), p.render()))
        .collect()
}

impl Prop {
    fn render(&self) -> Value {
        let mut v = match &self.kind {
            Kind::Number => json!({ "type": "number", "minimum": 0 }),
            Kind::Integer(min) => json!({ "type": "integer", "minimum": min }),
            Kind::String | Kind::StringDefault(_) => json!({ "type": "string" }),
            Kind::NullableString => json!({ "type": ["string", "null"] }),
            Kind::NullableNumber => json!({ "type": ["number", "null"] }),
            Kind::Array(items) => json!({ "type": "array", "items": items.render() }),
        };
        if !self.description.is_empty() {
            v["description"] = self.description.into();
        }
        if let Kind::StringDefault(d) = self.kind {
            v["default"] = d.into();
        }
        v
    }
}
