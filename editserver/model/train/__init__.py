"""Training: corpora (synthetic, mined from git, distilled), the masked-diffusion loss, the loop."""
