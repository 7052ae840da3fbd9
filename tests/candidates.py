"""Candidate pipelines for the loop tests: full replacements of mutable/pipeline.py."""
from pathlib import Path

STOCK = (Path(__file__).resolve().parent.parent / "mutable" / "pipeline.py").read_text()


def _patch(old: str, new: str) -> str:
    assert old in STOCK, old
    return STOCK.replace(old, new)


GEN_CALL = "        out = self.pipe(class_labels=list(request.labels)"

# A baseline with a redundant full pass whose result is thrown away: removing it is a real,
# exact 2x speedup that any CPU measures reliably.
REDUNDANT = _patch(GEN_CALL, "        self.pipe(class_labels=list(request.labels), guidance_scale=self.spec.guidance,\n"
                             "                  generator=[torch.Generator('cpu').manual_seed(s) "
                             "for s in request.seeds],\n"
                             "                  num_inference_steps=request.steps, output_type='np')\n" + GEN_CALL)
SLOWER = REDUNDANT
ALTERS = _patch("guidance_scale=self.spec.guidance,", "guidance_scale=self.spec.guidance * 0.75,")
RAISES = _patch("    def generate(self, request: Request) -> Generated:\n",
                "    def generate(self, request: Request) -> Generated:\n"
                "        raise RuntimeError('kernel exploded')\n")
NAN = _patch("        return Generated(latents=self._latents, images=images)",
             "        return Generated(latents=self._latents * float('nan'), images=images)")
HANG = _patch("    def generate(self, request: Request) -> Generated:\n",
              "    def generate(self, request: Request) -> Generated:\n        import time; time.sleep(3600)\n")
NOISY = _patch("    def generate(self, request: Request) -> Generated:\n",
               "    def generate(self, request: Request) -> Generated:\n"
               "        import random, time; time.sleep(random.choice([0.0, 0.05, 0.12]))\n")
COMMENT_ONLY = STOCK + "\n# a comment: same code, a different commit\n"


def slowed(fraction: float) -> str:
    """Each call sleeps `fraction` of its own time after it: that much slower, the outputs unchanged."""
    return _patch("    def generate(self, request: Request) -> Generated:\n",
                  "    def generate(self, request: Request) -> Generated:\n"
                  "        import time\n"
                  "        t0 = time.perf_counter()\n"
                  "        out = self._generate(request)\n"
                  f"        time.sleep({fraction!r} * (time.perf_counter() - t0))\n"
                  "        return out\n\n"
                  "    def _generate(self, request: Request) -> Generated:\n")


# An expression a candidate's code evaluates to the project root when it runs without a sandbox:
# its own file lies in the judge's folder (issue 38), so it finds the project as an attacker would,
# as the working directory of an ancestor process (the judge's) that holds a `.git`.
PROJECT_ROOT = ("(lambda _o: next((c for c in (_o.readlink(f'/proc/{p}/cwd') for p in __import__('itertools')"
                ".accumulate(range(8), lambda p, _: int(open(f'/proc/{p}/stat').read().rsplit(')', 1)[1].split()[1])"
                " or 1, initial=_o.getpid())) if _o.path.isdir(c + '/.git')), ''))(__import__('os'))")


# The transformer blocks call their attention and feed-forward around nn.Module.__call__ (as a
# rewrite that calls a fused function does): the modules stay registered, so `dit-ar profile`
# marks them, and their marks never fire. The outputs are the stock pipeline's.
BYPASSES_MODULES = _patch("        pipe.vae.decode = capture\n",
                          "        pipe.vae.decode = capture\n\n"
                          "        class _Direct:  # forward without __call__: no hook runs\n"
                          "            def __init__(self, m):\n"
                          "                self.m = m\n\n"
                          "            def __call__(self, *a, **k):\n"
                          "                return self.m.forward(*a, **k)\n\n"
                          "        for block in pipe.transformer.transformer_blocks:\n"
                          "            for name in ('attn1', 'ff'):\n"
                          "                object.__setattr__(block, name, _Direct(getattr(block, name)))\n")

# The VAE decoder sleeps SLOW_VAE_S inside its own forward, so the time lands in the "VAE decode"
# phase of `dit-ar profile` and nowhere else; the outputs are the stock pipeline's.
SLOW_VAE_S = 0.15
SLOW_VAE = _patch("        pipe.vae.decode = capture\n",
                  "        pipe.vae.decode = capture\n"
                  "        import time\n"
                  "        dec_forward = pipe.vae.decoder.forward\n\n"
                  "        def slow_forward(*a, **k):\n"
                  f"            time.sleep({SLOW_VAE_S!r})\n"
                  "            return dec_forward(*a, **k)\n\n"
                  "        pipe.vae.decoder.forward = slow_forward\n")
