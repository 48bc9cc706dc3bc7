//! The safe entry points of the x86-64 tiers, written once for every tier.
//!
//! A tier's kernels are `#[target_feature]` functions, which safe code may call only where the
//! features are known to be there. The dispatch table (`Kernels::for_tier`) holds safe
//! functions instead, and is built only after the tier's features were detected: those
//! functions are written here, once, rather than as one wrapper (and one `SAFETY` argument) per
//! kernel and tier.
//! - [`entry_points`]: `name(args) = kernel;` gives `name`, calling the tier's `kernel`;
//! - [`compiled_for`]: `name(args) = path;` gives `name`, running the portable `path`
//!   (`ggml_math`, `ops`) compiled with the tier's features: the same operations, so the same
//!   bits, with hardware FMA where the portable code asks for `mul_add` (without it each is a
//!   libm call).

/// `pub(in crate::kernels) fn name(args) -> ret`, calling `kernel(args)`, a `#[target_feature]`
/// function of the expanding tier. Two signatures have a short form, `name(W, A) = kernel;`
/// with `W` the weight block and `A` the activation block: the single-token passes
/// (`rows { … }`: [`TILE_ROWS`] rows, one activation) and the batch tiles (`tiles { … }`:
/// [`BATCH_TILE_ROWS`] rows × [`TILE_TOKENS`] tokens).
///
/// [`TILE_ROWS`]: crate::kernels::TILE_ROWS
/// [`BATCH_TILE_ROWS`]: crate::kernels::BATCH_TILE_ROWS
/// [`TILE_TOKENS`]: crate::kernels::TILE_TOKENS
macro_rules! entry_points {
    (rows { $($name:ident($W:ty, $A:ty) = $kernel:path;)* }) => {
        $crate::kernels::x86_64::entry_points::entry_points! {$(
            $name(
                w: &[&[$W]; $crate::kernels::TILE_ROWS],
                a: &[$A],
                out: &mut [f32; $crate::kernels::TILE_ROWS],
            ) = $kernel;
        )*}
    };
    (tiles { $($name:ident($W:ty, $A:ty) = $kernel:path;)* }) => {
        $crate::kernels::x86_64::entry_points::entry_points! {$(
            $name(
                w: &[&[$W]; $crate::kernels::BATCH_TILE_ROWS],
                a: &[&[$A]; $crate::kernels::TILE_TOKENS],
                out: &mut [[f32; $crate::kernels::BATCH_TILE_ROWS]; $crate::kernels::TILE_TOKENS],
            ) = $kernel;
        )*}
    };
    ($(
        $(#[$m:meta])*
        $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $kernel:path;
    )*) => {$(
        $(#[$m])*
        pub(in crate::kernels) fn $name($($arg: $ty),*) $(-> $ret)? {
            // SAFETY: only reachable through the dispatch table, which is built after the
            // features of this tier were detected.
            unsafe { $kernel($($arg),*) }
        }
    )*};
}
pub(super) use entry_points;

/// `pub(in crate::kernels) fn name(args) -> ret`, running `path(args)` compiled with the
/// target features `$feat`.
macro_rules! compiled_for {
    ($feat:literal; $(
        $(#[$m:meta])*
        $name:ident($($arg:ident: $ty:ty),* $(,)?) $(-> $ret:ty)? = $path:path;
    )*) => {$(
        $(#[$m])*
        pub(in crate::kernels) fn $name($($arg: $ty),*) $(-> $ret)? {
            #[target_feature(enable = $feat)]
            fn compiled($($arg: $ty),*) $(-> $ret)? {
                $path($($arg),*)
            }
            // SAFETY: only reachable through the dispatch table, which is built after the
            // features of this tier ($feat) were detected.
            unsafe { compiled($($arg),*) }
        }
    )*};
}
pub(super) use compiled_for;
