//! Parse: tokens → the item to annotate and the family's argument struct.
//!
//! [`args::sort_out`] splits the argument list and deals with keys (unknown, duplicate, missing,
//! `crate`); each family's darling struct ([`moe::MoeArgs`], …) then reads the values
//! ([`value`]) with their spans; [`item::kernel_struct`] checks what the attribute is on.

pub(crate) mod args;
pub(crate) mod item;
pub(crate) mod suggest;
pub(crate) mod targets;
pub(crate) mod value;

pub(crate) mod attention;
pub(crate) mod conv;
pub(crate) mod moe;
pub(crate) mod nf4;

/// Declares a family's argument struct: one `Option<Arg<T>>` per key (darling's `FromMeta`
/// reads them), the key list, and the span of each written argument for error reporting.
macro_rules! family_args {
    (
        $(#[$meta:meta])*
        $name:ident { $($(#[$field_meta:meta])* $field:ident : $ty:ty),* $(,)? }
    ) => {
        $(#[$meta])*
        #[derive(Debug, darling::FromMeta)]
        pub(crate) struct $name {
            $($(#[$field_meta])* pub $field: Option<$crate::parse::value::Arg<$ty>>,)*
        }

        impl $name {
            /// Every key, in declaration order.
            #[cfg(test)]
            pub(crate) const KEYS: &'static [&'static str] = &[$(stringify!($field)),*];

            /// Where the user wrote `key = value` and the value as written, if they did.
            pub(crate) fn written(
                &self,
                key: &str,
            ) -> Option<($crate::parse::value::SpanRange, String)> {
                match key {
                    $(stringify!($field) => {
                        self.$field.as_ref().map(|arg| (arg.whole, arg.text.clone()))
                    })*
                    _ => None,
                }
            }
        }
    };
}
pub(crate) use family_args;

/// Overwrites `slot` with the argument's value, when the user gave one.
pub(crate) fn set<T: Clone>(slot: &mut T, arg: &Option<value::Arg<T>>) {
    if let Some(arg) = arg {
        *slot = arg.value.clone();
    }
}

/// The value of a required argument (`None` when missing, already reported).
pub(crate) fn required<T: Clone>(arg: &Option<value::Arg<T>>) -> Option<T> {
    arg.as_ref().map(|arg| arg.value.clone())
}
