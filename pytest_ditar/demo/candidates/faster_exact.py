"""Candidate pipeline: lean DiT sampling loop (exact class).

Causal hypothesis: on the tiny CPU suite the math is microscopic (hidden width 16, 16 tokens,
2 blocks), so the ~21 ms batch-1 latency is dominated by Python/dispatch overhead, not FLOPs:
per step DiTPipeline goes through ~70 nn.Module __call__s (each walking hook machinery), the
attention processor re-inspects its signature, the sinusoidal timestep projection is rebuilt 3x
(once per block plus again for norm_out), block 0's conditioning MLP runs twice, the
cond/uncond `torch.cat([half, half])` doubles every scheduler op, and DPMSolverMultistepScheduler
recomputes its sigma/lambda coefficients from scratch (a dozen 0-dim tensor ops) each step.
This candidate runs the *same* algorithm with the same weights and the same op sequence per
element, but:
  * calls the transformer's weights through torch.nn.functional directly (no module/hook layers);
  * builds the timestep projection once per step and reuses block 0's conditioning for norm_out
    (stock computes it twice with identical inputs);
  * looks up the class embeddings once per request (they do not depend on the step);
  * precomputes the DPM-Solver++(2M) coefficients per step count with the scheduler's own
    formulas (identical float32 0-dim tensors) and applies the update to the B conditional
    latents only (stock updates 2B rows whose halves are identical copies);
  * runs under torch.inference_mode.
The VAE decode is the stock module. Initial noise: per-image CPU generators via diffusers'
randn_tensor, exactly as DiTPipeline does.

Class: exact (same algorithm; latents bit-identical to stock on the tiny CPU suite, images identical).

Measured with benchmarks/tiny_candidates.py (one process: stock mutable/ and this file,
3 warmups each, then 60 interleaved generate(lane_request(suite, lane)) calls per candidate;
`python benchmarks/tiny_candidates.py`). The 2-core machine was shared with another
CPU-bound job, so medians are inflated; min times are shown as the quiet-machine estimate.
  latency_b1:    median 38.1 -> 12.6 ms (3.02x); min 21.8 -> 7.7 ms (2.82x)
  throughput_b8: median 42.3 -> 18.2 ms (2.33x); min 27.2 -> 12.3 ms (2.21x)
(an earlier quieter run: latency_b1 median 23.7 -> 7.9 ms, 3.02x). Outputs vs stock on all 12 corpus
items at batch 4 and on both lanes: latents rel-L2 0.0, max |diff| 0.0, images identical.
Not run on CUDA here (no GPU venv); the code keeps device/dtype generic (scheduler coefficients
are CPU 0-dim tensors exactly as in the stock scheduler).

The switches below the imports are the optimization ladder's rungs (benchmarks/ladder.py flips
them one commit at a time). With the defaults, only LEAN is on: this file is then exactly the
candidate described above, and the one `dit-ar demo` keeps.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import DiTPipeline, DPMSolverMultistepScheduler
from diffusers.models.embeddings import get_timestep_embedding
from diffusers.utils.torch_utils import randn_tensor

from pytest_ditar.interface import Generated, PipelineSpec, Request

# ---- rung switches (benchmarks/ladder.py rewrites this block) ----------------------------
LEAN = True  # run the transformer through F.* on its own weights (cuts per-op Python overhead)
SDPA_BACKENDS = None  # e.g. ["CUDNN_ATTENTION", "FLASH_ATTENTION"]: preferred attention kernels
FUSED_QKV = False  # one GEMM for q, k, v instead of three
BATCHED_COND = False  # the 28 per-block conditioning MLPs and adaLN projections as batched GEMMs
CUDA_GRAPHS = False  # replay the whole transformer forward as one CUDA graph per batch shape
GRAPH_LOOP = False  # with CUDA_GRAPHS: the whole denoising loop (transformer, guidance, solver) as one graph
REGIONAL_COMPILE = None  # a torch.compile mode (e.g. "default") for the repeated DiT block: compiled once, 28 uses
VAE_COMPILE = None  # a torch.compile mode for the VAE decoder, run channels-last (its convolutions in NHWC)
FP16_ACCUMULATE = False  # cuBLAS half-precision GEMMs accumulate in fp16 (numerical)
DTYPE = None  # "bfloat16" overrides the suite's dtype (numerical)
STEPS_SCALE = 1.0  # < 1 runs fewer denoising steps (approximate)
INT8_WEIGHTS = False  # int8 weight-only linear layers via torchao (quantization)
REDUNDANT_PASS = False  # bad rung: a second, discarded transformer pass per step
GUIDANCE_SCALE = 1.0  # bad rung: multiplies the guidance scale (changes outputs)
BREAK_SEED = None  # bad rung: corrupts the output of the one request item with this seed
# ------------------------------------------------------------------------------------------


def dit_block(hs, e, w, *, heads: int, eps1: float, eps3: float, approx: str):
    """One DiT block (adaLN-zero attention + MLP), diffusers' op sequence on its own weights."""
    n, width = hs.shape[0], hs.shape[-1]
    shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = e.chunk(6, dim=1)
    nh = F.layer_norm(hs, (width,), None, None, eps1) * (1 + scale_msa[:, None]) + shift_msa[:, None]
    if "qkvw" in w:
        q, k, v = F.linear(nh, w["qkvw"], w["qkvb"]).chunk(3, dim=-1)
    else:
        q = F.linear(nh, w["qw"], w["qb"])
        k = F.linear(nh, w["kw"], w["kb"])
        v = F.linear(nh, w["vw"], w["vb"])
    hd = k.shape[-1] // heads
    q = q.view(n, -1, heads, hd).transpose(1, 2)
    k = k.view(n, -1, heads, hd).transpose(1, 2)
    v = v.view(n, -1, heads, hd).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False)
    a = a.transpose(1, 2).reshape(n, -1, heads * hd).to(q.dtype)
    a = F.linear(a, w["ow"], w["ob"])
    hs = gate_msa.unsqueeze(1) * a + hs
    nh = F.layer_norm(hs, (width,), None, None, eps3)
    nh = nh * (1 + scale_mlp[:, None]) + shift_mlp[:, None]
    f = F.gelu(F.linear(nh, w["f1w"], w["f1b"]), approximate=approx)
    f = F.linear(f, w["f2w"], w["f2b"])
    return gate_mlp.unsqueeze(1) * f + hs


class LeanDiT:
    def __init__(self, spec: PipelineSpec):
        dtype = getattr(torch, DTYPE or spec.dtype)
        pipe = DiTPipeline.from_pretrained(spec.model_dir, dtype=dtype, local_files_only=True)
        pipe.scheduler = DPMSolverMultistepScheduler.from_config(pipe.scheduler.config)
        pipe.set_progress_bar_config(disable=True)
        self.pipe = pipe.to(spec.device)
        if INT8_WEIGHTS:
            from torchao.quantization import int8_weight_only, quantize_

            quantize_(pipe.transformer, int8_weight_only())
        self._latents: Any = None  # a tensor once the VAE decodes (capture below)
        decode = pipe.vae.decode

        def capture(z, *args, **kwargs):  # the stock path's final latents (decoder input)
            self._latents = z
            return decode(z, *args, **kwargs)

        pipe.vae.decode = capture
        if VAE_COMPILE:
            # NHWC: cuDNN's half-precision convolutions run without transposing each activation
            # first; Inductor then fuses the group norms with their SiLUs. One graph per batch shape.
            pipe.vae.to(memory_format=torch.channels_last)
            pipe.vae.decoder = torch.compile(pipe.vae.decoder, mode=VAE_COMPILE, dynamic=False)
        if FP16_ACCUMULATE:
            torch.backends.cuda.matmul.allow_fp16_accumulation = True  # this worker's process only
        self._graphs: dict = {}
        self._loop_graphs: dict = {}
        self.spec = spec
        self.device = torch.device(spec.device)
        self.vae = pipe.vae
        self.scheduler = pipe.scheduler
        self._coef_cache: dict[int, list] = {}
        self._extract(pipe.transformer)

    # ------------------------------------------------------------------ transformer weights
    def _extract(self, tr) -> None:
        cfg = tr.config
        assert cfg.norm_type == "ada_norm_zero", "lean path implements the DiT (ada_norm_zero) transformer"
        self.dtype = tr.dtype
        self.in_ch = cfg.in_channels
        self.out_ch = tr.out_channels
        self.patch = tr.patch_size
        self.learned_sigma = cfg.out_channels // 2 == cfg.in_channels
        pe = tr.pos_embed
        assert not pe.layer_norm and pe.flatten and pe.pos_embed_max_size is None
        self.pe = pe  # stock module kept only for the (rare) resized-position-embedding path
        self.pe_w, self.pe_b, self.pos = pe.proj.weight, pe.proj.bias, pe.pos_embed
        self.pe_hw = (pe.height, pe.width)
        self.blocks = []
        cfgs = set()
        for blk in tr.transformer_blocks:
            n1 = blk.norm1
            emb = n1.emb
            tp = emb.time_proj
            te = emb.timestep_embedder
            assert te.cond_proj is None and te.post_act is None
            assert blk.attn2 is None and blk._chunk_size is None and blk.pos_embed is None
            a = blk.attn1
            assert a.norm_q is None and a.norm_k is None and a.group_norm is None and a.spatial_norm is None
            assert not a.residual_connection and a.rescale_output_factor == 1.0
            gelu = blk.ff.net[0]
            assert type(gelu).__name__ == "GELU" and len(blk.ff.net) == 3
            self.blocks.append(dict(
                tproj=(tp.num_channels, tp.flip_sin_to_cos, tp.downscale_freq_shift, tp.scale),
                t1w=te.linear_1.weight, t1b=te.linear_1.bias, t2w=te.linear_2.weight, t2b=te.linear_2.bias,
                table=emb.class_embedder.embedding_table.weight,
                adaw=n1.linear.weight, adab=n1.linear.bias,
                qw=a.to_q.weight, qb=a.to_q.bias, kw=a.to_k.weight, kb=a.to_k.bias,
                vw=a.to_v.weight, vb=a.to_v.bias, ow=a.to_out[0].weight, ob=a.to_out[0].bias,
                f1w=gelu.proj.weight, f1b=gelu.proj.bias,
                f2w=blk.ff.net[2].weight, f2b=blk.ff.net[2].bias,
            ))
            b = self.blocks[-1]
            if FUSED_QKV:
                b["qkvw"] = torch.cat([b["qw"], b["kw"], b["vw"]], 0)
                b["qkvb"] = torch.cat([b["qb"], b["kb"], b["vb"]], 0)
            # what the block body reads: tensors only, so one compiled graph serves all 28 blocks
            b["w"] = {k: b[k] for k in ("qkvw", "qkvb", "qw", "qb", "kw", "kb", "vw", "vb", "ow", "ob",
                                        "f1w", "f1b", "f2w", "f2b") if k in b}
            width = (tr.inner_dim,)
            assert tuple(blk.norm1.norm.normalized_shape) == width and tuple(blk.norm3.normalized_shape) == width
            cfgs.add((a.heads, blk.norm1.norm.eps, blk.norm3.eps, gelu.approximate))
        # every block has the same heads, eps and GELU: the block function closes over one config
        assert len(cfgs) == 1, "the blocks differ in heads, eps or GELU"
        heads, eps1, eps3, approx = cfgs.pop()
        body = functools.partial(dit_block, heads=heads, eps1=eps1, eps3=eps3, approx=approx)
        # dynamic=False: one graph per batch shape (b1, b8 and the corpus batch), recompiled, never guarded loose
        self._block = torch.compile(body, mode=REGIONAL_COMPILE, dynamic=False, fullgraph=True) \
            if REGIONAL_COMPILE else body
        # layer norms in this model are affine-free; check so the functional calls stay exact
        for blk in tr.transformer_blocks:
            assert blk.norm1.norm.weight is None and blk.norm3.weight is None
        assert tr.norm_out.weight is None
        self.no_eps, self.no_shape = tr.norm_out.eps, tr.norm_out.normalized_shape
        self.p1w, self.p1b = tr.proj_out_1.weight, tr.proj_out_1.bias
        self.p2w, self.p2b = tr.proj_out_2.weight, tr.proj_out_2.bias
        # distinct time projections (all blocks share one config in DiT): computed once per step
        self.tproj_cfgs = sorted({b["tproj"] for b in self.blocks})
        if BATCHED_COND:
            assert len(self.tproj_cfgs) == 1, "batched conditioning needs one timestep projection config"
            st = lambda k: torch.stack([b[k] for b in self.blocks])  # noqa: E731
            self.T1w, self.T1b, self.T2w, self.T2b = st("t1w"), st("t1b"), st("t2w"), st("t2b")
            self.Aw, self.Ab = st("adaw"), st("adab")

    def _transformer(self, x, t_vec, class_emb):
        """DiTTransformer2DModel.forward, same ops; t_vec [N] timesteps; class_emb per block [N, D]."""
        h, w = x.shape[-2] // self.patch, x.shape[-1] // self.patch
        hs = F.conv2d(x, self.pe_w, self.pe_b, stride=self.patch)
        hs = hs.flatten(2).transpose(1, 2)
        if (h, w) == self.pe_hw:
            pos = self.pos
        else:  # resized inputs: let the stock module build the interpolated table
            from diffusers.models.embeddings import get_2d_sincos_pos_embed
            pos = get_2d_sincos_pos_embed(embed_dim=self.pos.shape[-1], grid_size=(h, w), base_size=self.pe.base_size,
                                          interpolation_scale=self.pe.interpolation_scale, device=hs.device,
                                          output_type="pt").float().unsqueeze(0)
        hs = (hs + pos).to(hs.dtype)
        dt = hs.dtype
        projs = {c: get_timestep_embedding(t_vec, c[0], flip_sin_to_cos=c[1], downscale_freq_shift=c[2],
                                           scale=c[3]).to(dtype=dt)
                 for c in self.tproj_cfgs}
        cond0 = None
        if BATCHED_COND:
            p = projs[self.tproj_cfgs[0]].unsqueeze(0).expand(len(self.blocks), -1, -1)
            h1 = F.silu(torch.baddbmm(self.T1b[:, None], p, self.T1w.transpose(1, 2)))
            conds = torch.baddbmm(self.T2b[:, None], h1, self.T2w.transpose(1, 2)) + class_emb
            es = torch.baddbmm(self.Ab[:, None], F.silu(conds), self.Aw.transpose(1, 2))
            cond0 = conds[0]
        for i, b in enumerate(self.blocks):
            if BATCHED_COND:
                e = es[i]
            else:
                temb = F.linear(F.silu(F.linear(projs[b["tproj"]], b["t1w"], b["t1b"])), b["t2w"], b["t2b"])
                cond = temb + class_emb[i]
                if i == 0:
                    cond0 = cond
                e = F.linear(F.silu(cond), b["adaw"], b["adab"])
            hs = self._block(hs, e, b["w"])
        # output: stock recomputes block 0's conditioning with identical inputs; reuse it
        shift, scale = F.linear(F.silu(cond0), self.p1w, self.p1b).chunk(2, dim=1)
        hs = F.layer_norm(hs, self.no_shape, None, None, self.no_eps) * (1 + scale[:, None]) + shift[:, None]
        hs = F.linear(hs, self.p2w, self.p2b)
        side = int(hs.shape[1] ** 0.5)
        hs = hs.reshape(-1, side, side, self.patch, self.patch, self.out_ch)
        hs = torch.einsum("nhwpqc->nchpwq", hs)
        return hs.reshape(-1, self.out_ch, side * self.patch, side * self.patch)

    # ------------------------------------------------------------------ scheduler
    def _schedule(self, steps: int):
        """Per-step (timestep, DPM-Solver++ coefficients) computed with the scheduler's own formulas."""
        if steps in self._coef_cache:
            return self._coef_cache[steps]
        sch = self.scheduler
        cfg = sch.config
        assert cfg.algorithm_type == "dpmsolver++" and cfg.solver_order == 2 and cfg.solver_type == "midpoint"
        assert cfg.prediction_type == "epsilon" and not cfg.thresholding and not cfg.use_flow_sigmas
        assert cfg.variance_type not in ("learned", "learned_range")
        sch.set_timesteps(steps)
        timesteps, sigmas = sch.timesteps, sch.sigmas
        n = len(timesteps)

        def ab(s):  # _sigma_to_alpha_sigma_t
            alpha = 1 / ((s**2 + 1) ** 0.5)
            return alpha, s * alpha

        plan: list[tuple[Any, ...]] = []
        lower_order_nums = 0
        for i in range(n):
            lower_final = (i == n - 1) and (cfg.euler_at_final or (cfg.lower_order_final and n < 15)
                                            or cfg.final_sigmas_type == "zero")
            alpha_s0, sigma_s0 = ab(sigmas[i])
            alpha_t, sigma_t = ab(sigmas[i + 1])
            lam_t = torch.log(alpha_t) - torch.log(sigma_t)
            lam_s0 = torch.log(alpha_s0) - torch.log(sigma_s0)
            h = lam_t - lam_s0
            c_sample = sigma_t / sigma_s0
            c_d0 = alpha_t * (torch.exp(-h) - 1.0)
            if lower_order_nums < 1 or lower_final:
                plan.append((timesteps[i], sigma_s0, alpha_s0, 1, c_sample, c_d0, None, None))
            else:
                alpha_s1, sigma_s1 = ab(sigmas[i - 1])
                lam_s1 = torch.log(alpha_s1) - torch.log(sigma_s1)
                r0 = (lam_s0 - lam_s1) / h
                c_d1 = 0.5 * (alpha_t * (torch.exp(-h) - 1.0))
                plan.append((timesteps[i], sigma_s0, alpha_s0, 2, c_sample, c_d0, 1.0 / r0, c_d1))
            if lower_order_nums < cfg.solver_order:
                lower_order_nums += 1
        self._coef_cache[steps] = plan
        return plan

    # ------------------------------------------------------------------ sampling
    def _forward(self, inp, t_vec, class_emb):
        """The transformer, replayed from a CUDA graph per input shape when CUDA_GRAPHS is on."""
        if not (CUDA_GRAPHS and inp.is_cuda):
            return self._transformer(inp, t_vec, class_emb)
        key = (tuple(inp.shape), inp.dtype)
        g = self._graphs.get(key)
        if g is None:
            static = [inp.clone(), t_vec.clone(), class_emb.clone()]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(2):  # warm up kernels and workspaces outside the capture
                    self._transformer(*static)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self._transformer(*static)
            g = self._graphs[key] = (graph, static, out)
        graph, static, out = g
        for dst, src in zip(static, (inp, t_vec, class_emb)):
            dst.copy_(src)
        graph.replay()
        return out.clone()

    def _denoise(self, x, class_emb, plan, bsz: int, guidance: float, forward, t_dev=None):
        """The DPM-Solver++ (2M) loop from noise `x`; `forward` runs the transformer. `t_dev` (the
        timesteps already on the device) keeps the loop free of host-to-device copies, so a CUDA graph
        can capture it whole."""
        dev = x.device
        cfg = guidance > 1
        n_in = class_emb.shape[1]
        prev_x0 = None
        for i, (t, sigma_s, alpha_s, order, c_sample, c_d0, inv_r0, c_d1) in enumerate(plan):
            inp = torch.cat([x, x], dim=0) if cfg else x
            t_vec = (t_dev[i][None] if t_dev is not None else t[None].to(dev)).expand(n_in).contiguous()
            if REDUNDANT_PASS:
                forward(inp, t_vec, class_emb)
            out = forward(inp, t_vec, class_emb)
            eps = out[:, :self.in_ch]
            if cfg:
                cond_eps, uncond_eps = torch.split(eps, bsz, dim=0)
                eps = uncond_eps + guidance * (cond_eps - uncond_eps)
            if not self.learned_sigma and not cfg:
                eps = out
            # DPM-Solver++ (2M, midpoint): convert_model_output then first/second order update
            x0 = (x - sigma_s * eps) / alpha_s
            x32 = x.to(torch.float32)
            if order == 1:
                nx = c_sample * x32 - c_d0 * x0
            else:
                d1 = inv_r0 * (x0 - prev_x0)
                nx = c_sample * x32 - c_d0 * x0 - c_d1 * d1
            x = nx.to(x0.dtype)
            prev_x0 = x0
        return x

    def _replay_loop(self, x, class_emb, plan, bsz: int, guidance: float):
        """The whole loop replayed from one CUDA graph per (shape, steps, guidance): the solver's
        coefficients are host scalars, so the capture holds them as the kernels' arguments, and one
        launch replaces every step's dozen small kernels and their host overhead."""
        key = (tuple(x.shape), tuple(class_emb.shape), x.dtype, len(plan), guidance)
        g = self._loop_graphs.get(key)
        if g is None:
            t_dev = torch.stack([p[0] for p in plan]).to(x.device)
            static = [x.clone(), class_emb.clone()]
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # compile and allocate outside the capture
                self._denoise(static[0], static[1], plan, bsz, guidance, self._transformer, t_dev)
            torch.cuda.current_stream().wait_stream(stream)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = self._denoise(static[0], static[1], plan, bsz, guidance, self._transformer, t_dev)
            g = self._loop_graphs[key] = (graph, static, out, t_dev)
        graph, static, out, _ = g
        static[0].copy_(x)
        static[1].copy_(class_emb)
        graph.replay()
        return out.clone()

    def _backends(self):
        import contextlib

        if not SDPA_BACKENDS:
            return contextlib.nullcontext()
        from torch.nn.attention import SDPBackend, sdpa_kernel

        wanted = [getattr(SDPBackend, n) for n in SDPA_BACKENDS] + [SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]
        try:
            return sdpa_kernel(wanted, set_priority=True)  # the VAE's head dim 512 falls back down the list
        except TypeError:
            return sdpa_kernel(wanted)

    def generate(self, request: Request) -> Generated:
        steps = max(1, round(request.steps * STEPS_SCALE))
        request = Request(request.labels, request.seeds, steps)
        with self._backends():
            out = self._generate_lean(request) if LEAN else self._generate_stock(request)
        if BREAK_SEED in request.seeds:
            i = request.seeds.index(BREAK_SEED)
            out.latents = out.latents.clone()  # generated under inference_mode: edit a normal copy
            out.latents[i] = -out.latents[i]
            out.images[i] = 255 - out.images[i]
        return out

    @torch.no_grad()
    def _generate_stock(self, request: Request) -> Generated:
        generators = [torch.Generator("cpu").manual_seed(s) for s in request.seeds]
        out = self.pipe(class_labels=list(request.labels), guidance_scale=self.spec.guidance * GUIDANCE_SCALE,
                        generator=generators, num_inference_steps=request.steps, output_type="np")
        images = np.clip(np.rint(out.images * 255.0), 0, 255).astype(np.uint8)
        return Generated(latents=self._latents.clone(), images=images)

    @torch.inference_mode()
    def _generate_lean(self, request: Request) -> Generated:
        dev, dtype = self.device, self.dtype
        bsz = len(request.labels)
        guidance = self.spec.guidance * GUIDANCE_SCALE
        generators = [torch.Generator("cpu").manual_seed(s) for s in request.seeds]
        size = self.pipe.transformer.config.sample_size
        x = randn_tensor((bsz, self.in_ch, size, size), generator=generators, device=dev, dtype=dtype)

        labels = torch.tensor(list(request.labels), device=dev).reshape(-1)
        cfg = guidance > 1
        if cfg:
            labels = torch.cat([labels, torch.tensor([1000] * bsz, device=dev)], 0)
        class_emb = torch.stack([F.embedding(labels, b["table"]) for b in self.blocks])  # step-independent

        plan = self._schedule(request.steps)
        if CUDA_GRAPHS and GRAPH_LOOP and x.is_cuda:
            x = self._replay_loop(x, class_emb, plan, bsz, guidance)
        else:
            x = self._denoise(x, class_emb, plan, bsz, guidance, self._forward)

        latents = 1 / self.vae.config.scaling_factor * x
        z = latents.contiguous(memory_format=torch.channels_last) if VAE_COMPILE else latents
        samples = self.vae.decode(z).sample
        samples = (samples / 2 + 0.5).clamp(0, 1)
        samples = samples.cpu().permute(0, 2, 3, 1).float().numpy()
        images = np.clip(np.rint(samples * 255.0), 0, 255).astype(np.uint8)
        return Generated(latents=latents.clone(), images=images)


def build(spec: PipelineSpec) -> LeanDiT:
    return LeanDiT(spec)
