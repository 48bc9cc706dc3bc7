//! Llama (and Mistral, SmolLM, …): the base recipe. Optional Q/K/V and output biases, Llama 3
//! RoPE frequency divisors where the file has them; pairs `(2i, 2i+1)` rotate; SwiGLU.

use super::Recipe;

pub(super) fn recipe() -> Recipe {
    Recipe::llama()
}
