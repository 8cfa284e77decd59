//! `closed_set!`: a unit enum whose wire name is written once per variant and serves serde,
//! `name()`, `from_name()`, `Display` and `FromStr`, so no crate compares the strings itself.

/// Defines a unit enum whose wire name (serde, `name()`, `from_name()`, `Display`, `FromStr`)
/// is given once per variant, plus `ALL` in declaration order. `FromStr` fails with
/// [`UnknownName`], which calls the set by `$label` and lists the accepted names.
macro_rules! closed_set {
    (
        $(#[$meta:meta])*
        pub enum $name:ident ($label:literal) {
            $( $(#[doc = $doc:literal])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash,
            ::serde::Serialize, ::serde::Deserialize,
        )]
        pub enum $name {
            $( $(#[doc = $doc])* #[serde(rename = $wire)] $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: [$name; [$($wire),+].len()] = [$($name::$variant),+];

            /// The wire name, as it appears in events, logs and replies.
            pub fn name(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }

            /// The variant whose wire name is `name`; `None` for any other string.
            pub fn from_name(name: &str) -> Option<$name> {
                match name {
                    $( $wire => Some($name::$variant), )+
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.pad(self.name())
            }
        }

        impl ::std::str::FromStr for $name {
            type Err = $crate::closed_set::UnknownName;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                $name::from_name(s).ok_or_else(|| $crate::closed_set::UnknownName {
                    what: $label,
                    value: s.to_owned(),
                    expected: &[$($wire),+],
                })
            }
        }
    };
}

pub(crate) use closed_set;

/// A string that is none of a closed set's wire names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownName {
    /// What the set is called in an error, e.g. `action category`.
    pub what: &'static str,
    /// The string given.
    pub value: String,
    /// Every accepted name, in declaration order (empty: too many to list).
    pub expected: &'static [&'static str],
}

impl std::fmt::Display for UnknownName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unknown {} {:?}", self.what, self.value)?;
        if self.expected.is_empty() {
            return Ok(());
        }
        write!(f, ": expected one of {}", self.expected.join(", "))
    }
}

impl std::error::Error for UnknownName {}
