//! The form of a key's one declaration: [`sections!`] turns a list of sections and their keys
//! (type, default, codec, flag, help, docs) into the section structs with their serde
//! attributes and defaults, and the [`Key`] table that the env layer, the flags, `--help` and
//! docs/CONFIG.md are all derived from (see [`super::keys`]). The declarations themselves are
//! in [`super::sections`].

use super::Config;
use super::units::BadValue;

/// One scalar key, as declared.
pub struct Key {
    /// Dotted name, as in the file: `ingest.queue_capacity`.
    pub name: &'static str,
    /// The `veltrix serve` flag that sets it, if any.
    pub flag: Option<Flag>,
    /// One line for `--help`.
    pub help: &'static str,
    /// The meaning column of docs/CONFIG.md.
    pub doc: &'static str,
    /// The default as docs/CONFIG.md shows it, when the value alone says too little.
    pub shown: Option<&'static str>,
    /// The current value as it would be written in an env var ("" for unset).
    pub get: fn(&Config) -> String,
    /// Set from the text form (env var or flag).
    pub set: fn(&mut Config, &str) -> Result<(), BadValue>,
}

impl Key {
    /// `VX_<SECTION>_<KEY>`.
    pub fn env(&self) -> String {
        env_name(self.name)
    }
}

/// `VX_<SECTION>_<KEY>` of a dotted name.
pub fn env_name(name: &str) -> String {
    format!("VX_{}", name.replace('.', "_").to_ascii_uppercase())
}

/// A key's `veltrix serve` flag.
pub struct Flag {
    /// `--listen`.
    pub long: &'static str,
    pub value_name: &'static str,
    /// What clap checks the value with before the key's codec parses it.
    pub parser: fn() -> clap::builder::ValueParser,
}

/// A flag's clap parser, from whatever clap can make one of.
pub fn value_parser(p: impl Into<clap::builder::ValueParser>) -> clap::builder::ValueParser {
    p.into()
}

/// A list-valued key, set in the file only.
pub struct FileOnly {
    pub name: &'static str,
    /// The default as docs/CONFIG.md shows it.
    pub shown: &'static str,
    pub help: &'static str,
    pub doc: &'static str,
}

/// Declare config sections and their scalar keys: each key's field, default, [`Codec`]
/// (text form), optional `deserialize_with` (file form), flag and texts, once.
///
/// A section marked `@custom` gets its keys (env, flags, `--help`, docs) but not its struct:
/// the struct is written by hand, for a section whose file form is more than a mapping of
/// its keys (`features`: a list of declarations, or a mapping with them and its keys).
///
/// [`Codec`]: super::codec::Codec
macro_rules! sections {
    ($(
        $(#[$smeta:meta])*
        $(@$custom:ident)?
        $section:ident: $Struct:ident {$(
            $(#[$fmeta:meta])*
            $field:ident: $ty:ty = $default:expr, via $codec:ty,
            $(de $de:literal,)?
            $(flag($long:literal, $vname:literal, $parser:expr),)?
            $(shown $shown:literal,)?
            help $help:literal,
            doc $doc:literal;
        )*}
    )*) => {
        $(
            sections!(@struct [$($custom)?] $(#[$smeta])* $Struct {$(
                [$(#[$fmeta])*] [$($de)?] $field: $ty = $default;
            )*});
        )*

        /// Every scalar key, in declaration order.
        pub const KEYS: &[$crate::config::declare::Key] = &[$($(
            $crate::config::declare::Key {
                name: concat!(stringify!($section), ".", stringify!($field)),
                flag: sections!(@flag $($long, $vname, $parser)?),
                help: $help,
                doc: $doc,
                shown: sections!(@shown $($shown)?),
                get: |c: &$crate::config::Config| {
                    <$codec as $crate::config::codec::Codec>::format(&c.$section.$field)
                },
                set: |c: &mut $crate::config::Config, v: &str| {
                    c.$section.$field = <$codec as $crate::config::codec::Codec>::parse(v)?;
                    Ok(())
                },
            },
        )*)*];
    };
    (@struct [] $(#[$smeta:meta])* $Struct:ident {$(
        [$(#[$fmeta:meta])*] [$($de:literal)?] $field:ident: $ty:ty = $default:expr;
    )*}) => {
        $(#[$smeta])*
        #[derive(Clone, Debug, serde::Deserialize, PartialEq)]
        #[serde(default, deny_unknown_fields)]
        pub struct $Struct {$(
            $(#[$fmeta])*
            $(#[serde(deserialize_with = $de)])?
            pub $field: $ty,
        )*}

        impl Default for $Struct {
            fn default() -> Self {
                $Struct { $($field: $default,)* }
            }
        }
    };
    (@struct [custom] $($rest:tt)*) => {};
    (@flag) => { None };
    (@flag $long:literal, $vname:literal, $parser:expr) => {
        Some($crate::config::declare::Flag {
            long: $long,
            value_name: $vname,
            parser: || $crate::config::declare::value_parser($parser),
        })
    };
    (@shown) => { None };
    (@shown $shown:literal) => { Some($shown) };
}

pub(crate) use sections;
