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

use crate::kernels::blocks::BlockQ4_0;
use crate::kernels::{Q8Group, MAX_PANEL_TOKENS, PANEL_ROWS, PANEL_TOKENS};

/// Checks a panel call's arguments (both tiers' panels take the same) and returns the rows'
/// block count: `a` holds `tokens.div_ceil(PANEL_TOKENS)` groups (at most
/// [`MAX_PANEL_TOKENS`] tokens) of activations of one length, `out` one output per row and
/// token, and `w` rows of that length.
///
/// # Panics
/// Where any of that does not hold.
pub(super) fn check_panel(
    w: &[&[BlockQ4_0]; PANEL_ROWS],
    a: &[Q8Group],
    tokens: usize,
    out: &[f32],
) -> usize {
    let groups = a.len();
    assert!(
        groups > 0 && groups == tokens.div_ceil(PANEL_TOKENS) && tokens <= MAX_PANEL_TOKENS,
        "panel: {groups} groups for {tokens} tokens"
    );
    assert_eq!(out.len(), tokens * PANEL_ROWS, "panel output size mismatch");
    let n = a[0].blocks[0].len();
    let same = |g: &Q8Group| {
        g.blocks.iter().all(|b| b.len() == n)
            && g.sums.iter().all(|s| s.len() == n)
            && g.scales.iter().all(|s| s.len() == n)
    };
    assert!(a.iter().all(same), "panel activations of unequal lengths");
    assert!(
        w.iter().all(|r| r.len() == n),
        "panel: weight rows of {n} blocks"
    );
    n
}
