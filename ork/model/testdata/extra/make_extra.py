#!/usr/bin/env python3
"""Tiny random-weight lfm2 (dense) and qwen35moe GGUF models, for checking orkpipe's forward passes of
these architectures against llama.cpp (TestExtraArchitectures). Built from the helpers and shapes of
../shared/testdata/hybrid/make_tiny.py (same tokenizer, same layer layout; lfm2 = lfm2moe's layers with
dense FFNs, qwen35moe = qwen35's layers with 8 softmax-routed experts of 96, top-2, and a shared expert
of 128).

  PYTHONPATH=LLAMA_SRC/gguf-py python3 make_extra.py --outdir DIR   (Debian python3-numpy)
"""
import argparse, os, sys
import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--outdir", required=True)
ap.add_argument("--shared", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../../../shared/testdata"))
args = ap.parse_args()
sys.path.insert(0, os.path.join(args.shared, "hybrid"))
import make_tiny as mt
import gguf
from gguf import GGUFWriter

VOCAB = os.path.join(args.shared, "stories260K.gguf")

def build_lfm2(path):
    h = mt.LFM2MOE
    rng = np.random.default_rng(3)
    E = h["n_embd"]; types = h["layer_types"]; L = len(types); F = h["n_ff"]
    H, HKV = h["n_head"], h["n_head_kv"]; D = E // H; LC = h["l_cache"]
    w = GGUFWriter(path, "lfm2")
    w.add_name("tiny-lfm2-random")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab = mt.copy_tokenizer(w, VOCAB)
    w.add_vocab_size(n_vocab); w.add_context_length(4096); w.add_embedding_length(E); w.add_block_count(L)
    w.add_feed_forward_length(F); w.add_head_count(H)
    w.add_head_count_kv([HKV if t == "attn" else 0 for t in types])
    w.add_layer_norm_rms_eps(h["rms_eps"]); w.add_rope_dimension_count(D); w.add_rope_freq_base(h["rope_freq_base"])
    w.add_shortconv_l_cache(LC)
    ts = mt.TensorSet(rng)
    ts.normal("token_embd.weight", (E, n_vocab), 0.5)
    for il, t in enumerate(types):
        p = f"blk.{il}."
        ts.norm(p + "attn_norm.weight", (E,))
        if t == "attn":
            ts.normal(p + "attn_q.weight", (E, H * D), 1 / np.sqrt(E))
            ts.normal(p + "attn_k.weight", (E, HKV * D), 1 / np.sqrt(E))
            ts.normal(p + "attn_v.weight", (E, HKV * D), 1 / np.sqrt(E))
            ts.norm(p + "attn_q_norm.weight", (D,), mean=2.0)
            ts.norm(p + "attn_k_norm.weight", (D,), mean=2.0)
            ts.normal(p + "attn_output.weight", (E, E), 1 / np.sqrt(E))
        else:
            ts.normal(p + "shortconv.in_proj.weight", (E, 3 * E), 1 / np.sqrt(E))
            ts.uniform(p + "shortconv.conv.weight", (LC, E), -1 / np.sqrt(LC), 1 / np.sqrt(LC), keep_f32=True)
            ts.normal(p + "shortconv.out_proj.weight", (E, E), 1 / np.sqrt(E))
        ts.norm(p + "ffn_norm.weight", (E,))
        ts.normal(p + "ffn_gate.weight", (E, F), 1 / np.sqrt(E))
        ts.normal(p + "ffn_up.weight", (E, F), 1 / np.sqrt(E))
        ts.normal(p + "ffn_down.weight", (F, E), 1 / np.sqrt(F))
    ts.norm("token_embd_norm.weight", (E,))
    ts.normal("output.weight", (E, n_vocab), 0.25)
    ts.write(w, False); mt.finish(w)

def build_qwen35moe(path):
    h = mt.QWEN35
    rng = np.random.default_rng(36)
    E, L = h["n_embd"], h["n_layer"]
    H, HKV, D = h["n_head"], h["n_head_kv"], h["head_dim"]
    dk = dv = h["ssm_state_size"]; nk, nv = h["ssm_group_count"], h["ssm_time_step_rank"]
    key_dim, value_dim = dk * nk, dv * nv; conv_dim = 2 * key_dim + value_dim; K = h["ssm_conv_kernel"]
    NE, NU, FE, FS = 8, 2, 96, 128
    w = GGUFWriter(path, "qwen35moe")
    w.add_name("tiny-qwen35moe-random")
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    n_vocab = mt.copy_tokenizer(w, VOCAB)
    w.add_vocab_size(n_vocab); w.add_context_length(4096); w.add_embedding_length(E); w.add_block_count(L)
    w.add_feed_forward_length(192)
    w.add_expert_count(NE); w.add_expert_used_count(NU)
    w.add_expert_feed_forward_length(FE); w.add_expert_shared_feed_forward_length(FS)
    w.add_head_count(H); w.add_head_count_kv(HKV); w.add_key_length(D); w.add_value_length(D)
    w.add_layer_norm_rms_eps(h["rms_eps"]); w.add_rope_dimension_count(h["n_rot"])
    w.add_rope_dimension_sections(h["rope_sections"]); w.add_rope_freq_base(h["rope_freq_base"])
    w.add_ssm_conv_kernel(K); w.add_ssm_state_size(dk); w.add_ssm_group_count(nk)
    w.add_ssm_time_step_rank(nv); w.add_ssm_inner_size(value_dim)
    w.add_full_attention_interval(4)
    ts = mt.TensorSet(rng)
    ts.normal("token_embd.weight", (E, n_vocab), 0.5)
    for il in range(L):
        p = f"blk.{il}."
        ts.norm(p + "attn_norm.weight", (E,))
        if (il + 1) % 4 == 0:
            ts.normal(p + "attn_q.weight", (E, 2 * H * D), 1 / np.sqrt(E))
            ts.normal(p + "attn_k.weight", (E, HKV * D), 1 / np.sqrt(E))
            ts.normal(p + "attn_v.weight", (E, HKV * D), 1 / np.sqrt(E))
            ts.norm(p + "attn_q_norm.weight", (D,), mean=2.0)
            ts.norm(p + "attn_k_norm.weight", (D,), mean=2.0)
            ts.normal(p + "attn_output.weight", (H * D, E), 1 / np.sqrt(H * D))
        else:
            ts.normal(p + "attn_qkv.weight", (E, conv_dim), 1 / np.sqrt(E))
            ts.normal(p + "attn_gate.weight", (E, value_dim), 1 / np.sqrt(E))
            ts.uniform(p + "ssm_conv1d.weight", (K, conv_dim), -0.5, 0.5, keep_f32=True)
            ts.uniform(p + "ssm_dt.bias", (nv,), -2.0, 0.0, keep_f32=True)
            a = -np.exp(rng.uniform(np.log(0.1), np.log(2.0), (nv,))).astype(np.float32)
            ts.const(p + "ssm_a", a)
            ts.normal(p + "ssm_beta.weight", (E, nv), 0.1)
            ts.normal(p + "ssm_alpha.weight", (E, nv), 0.05)
            ts.norm(p + "ssm_norm.weight", (dv,))
            ts.normal(p + "ssm_out.weight", (value_dim, E), 1 / np.sqrt(value_dim))
        ts.norm(p + "post_attention_norm.weight", (E,))
        ts.normal(p + "ffn_gate_inp.weight", (E, NE), 0.25, keep_f32=True)
        ts.normal(p + "ffn_gate_exps.weight", (E, FE, NE), 1 / np.sqrt(E))
        ts.normal(p + "ffn_up_exps.weight", (E, FE, NE), 1 / np.sqrt(E))
        ts.normal(p + "ffn_down_exps.weight", (FE, E, NE), 1 / np.sqrt(FE))
        ts.normal(p + "ffn_gate_inp_shexp.weight", (E,), 0.25, keep_f32=True)
        ts.normal(p + "ffn_gate_shexp.weight", (E, FS), 1 / np.sqrt(E))
        ts.normal(p + "ffn_up_shexp.weight", (E, FS), 1 / np.sqrt(E))
        ts.normal(p + "ffn_down_shexp.weight", (FS, E), 1 / np.sqrt(FS))
    ts.norm("output_norm.weight", (E,))
    ts.normal("output.weight", (E, n_vocab), 0.25)
    ts.write(w, False); mt.finish(w)

os.makedirs(args.outdir, exist_ok=True)
build_lfm2(os.path.join(args.outdir, "tiny-lfm2.gguf"))
build_qwen35moe(os.path.join(args.outdir, "tiny-qwen35moe.gguf"))
