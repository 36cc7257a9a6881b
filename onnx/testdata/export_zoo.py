# Runs on the GPU machine (torch, torchvision, timm, transformers, onnx, onnxruntime): the library
# architectures a new user exports as they come (torchvision, timm, Hugging Face configs at tiny
# sizes), random weights (no downloads), each through the TorchScript exporter at opset 17 (as
# ../shared/models was made) and, for the names in DYNAMO, through the dynamo one too, with
# ONNX Runtime's output. usage: python3 export_zoo.py OUT_DIR [PREFIX ...]: the models whose names
# start with a PREFIX (default all); writes OUT_DIR/zoo-PREFIX.json (the models.json layout) beside
# the models, so that several exports can run at once; check_zoo.py then runs them on kiln.
import os, sys, json, signal, time, numpy as np, onnx, onnxruntime as ort, torch
from export_record import export_one
from torch import nn
torch.manual_seed(0); np.random.seed(0)


def calibrated(m, shape):  # BatchNorm statistics from random batches, so outputs are O(0.1-1)
    m.train()
    with torch.no_grad():
        for _ in range(3): m(torch.randn(*shape))
    return m.eval()


class First(nn.Module):  # the main tensor of a Hugging Face output
    def __init__(s, m, key, kw):
        super().__init__(); s.m = m; s.key = key; s.kw = kw
    def forward(s, *xs):
        return getattr(s.m(**dict(zip(s.kw, xs))), s.key)


def tv(name, size=224, **kw):
    import torchvision
    return lambda: (calibrated(getattr(torchvision.models, name)(weights=None, **kw), (4, 3, size, size)),
                    (torch.randn(2, 3, size, size),), ["x"])


def tm(name, size=224, **kw):
    import timm
    return lambda: (calibrated(timm.create_model(name, pretrained=False, **kw), (4, 3, size, size)),
                    (torch.randn(2, 3, size, size),), ["x"])


def text(cls, cfg, key="last_hidden_state", mask=True, T=16, vocab=1000):
    def make():
        import transformers
        m = getattr(transformers, cls)(getattr(transformers, cfg[0])(**cfg[1])).eval()
        ids = torch.randint(0, vocab, (2, T))
        if not mask: return First(m, key, ["input_ids"]).eval(), (ids,), ["ids"]
        am = torch.ones(2, T, dtype=torch.int64); am[1, T - 5:] = 0  # the second sequence padded
        return First(m, key, ["input_ids", "attention_mask"]).eval(), (ids, am), ["ids", "mask"]
    return make


def image(cls, cfg, key="last_hidden_state", size=64):
    def make():
        import transformers
        m = getattr(transformers, cls)(getattr(transformers, cfg[0])(**cfg[1])).eval()
        return First(m, key, ["pixel_values"]).eval(), (torch.randn(2, 3, size, size),), ["x"]
    return make


def whisper():
    import transformers
    cfg = transformers.WhisperConfig(d_model=128, encoder_layers=2, encoder_attention_heads=2, encoder_ffn_dim=256,
                                     decoder_layers=1, decoder_attention_heads=2, decoder_ffn_dim=256,
                                     num_mel_bins=80, max_source_positions=50, vocab_size=1000, pad_token_id=0,
                                     bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    enc = transformers.WhisperModel(cfg).get_encoder().eval()
    return First(enc, "last_hidden_state", ["input_features"]).eval(), (torch.randn(2, 80, 100),), ["x"]


class Key(nn.Module):  # one entry of a dict output (torchvision's segmentation models)
    def __init__(s, m, key):
        super().__init__(); s.m = m; s.key = key
    def forward(s, x):
        return s.m(x)[s.key]


def segmentation(name, size=128):
    import torchvision
    make = getattr(torchvision.models.segmentation, name)
    return lambda: (calibrated(Key(make(weights=None, weights_backbone=None, aux_loss=None), "out"), (2, 3, size, size)),
                    (torch.randn(2, 3, size, size),), ["x"])


def video(name):
    import torchvision
    return lambda: (calibrated(getattr(torchvision.models.video, name)(weights=None), (2, 3, 4, 56, 56)),
                    (torch.randn(1, 3, 4, 56, 56),), ["x"])


def wav2vec2():  # convolutional feature extractor with GroupNorm, then a transformer encoder
    import transformers
    cfg = transformers.Wav2Vec2Config(hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=128,
                                      conv_dim=(32, 32, 32), conv_stride=(5, 2, 2), conv_kernel=(10, 3, 3),
                                      num_feat_extract_layers=3, num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
    m = transformers.Wav2Vec2Model(cfg).eval()
    return First(m, "last_hidden_state", ["input_values"]).eval(), (torch.randn(2, 4000),), ["x"]


small = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=512)
lm = dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
          max_position_embeddings=64)
ZOO = {
    # torchvision
    "tv_squeezenet1_1": tv("squeezenet1_1"),
    "tv_resnet18": tv("resnet18"),
    "tv_mobilenet_v2": tv("mobilenet_v2"),
    "tv_mobilenet_v3_small": tv("mobilenet_v3_small"),
    "tv_efficientnet_b0": tv("efficientnet_b0"),
    "tv_shufflenet_v2_x1_0": tv("shufflenet_v2_x1_0"),
    "tv_mnasnet0_5": tv("mnasnet0_5"),
    "tv_regnet_y_400mf": tv("regnet_y_400mf"),
    "tv_densenet121": tv("densenet121", size=128),
    "tv_googlenet": tv("googlenet", aux_logits=False, init_weights=True),
    "tv_convnext_tiny": tv("convnext_tiny", size=128),
    "tv_swin_t": tv("swin_t"),
    "tv_vit_b_16": tv("vit_b_16"),
    "tv_resnet50": tv("resnet50", size=160),
    # timm
    "timm_vit_tiny": tm("vit_tiny_patch16_224"),
    "timm_deit_tiny_distilled": tm("deit_tiny_distilled_patch16_224"),
    "timm_mobilevit_xxs": tm("mobilevit_xxs", size=256),
    "timm_levit_128s": tm("levit_128s"),
    "timm_convnext_atto": tm("convnext_atto"),
    "timm_ghostnet_050": tm("ghostnet_050"),
    "timm_edgenext_xx_small": tm("edgenext_xx_small", size=256),
    "timm_efficientformer_l1": tm("efficientformer_l1"),
    "timm_resnet18d": tm("resnet18d"),
    "timm_poolformer_s12": tm("poolformer_s12"),
    # Hugging Face, tiny configurations
    "hf_bert": text("BertModel", ("BertConfig", dict(vocab_size=1000, max_position_embeddings=64, **small))),
    "hf_gpt2": text("GPT2LMHeadModel", ("GPT2Config", dict(vocab_size=1000, n_positions=64, n_embd=128, n_layer=2, n_head=2)), key="logits"),
    "hf_distilbert": text("DistilBertModel", ("DistilBertConfig", dict(vocab_size=1000, max_position_embeddings=64, dim=128, n_layers=2, n_heads=2, hidden_dim=256))),
    "hf_roberta": text("RobertaModel", ("RobertaConfig", dict(vocab_size=1000, max_position_embeddings=66, **small))),
    "hf_albert": text("AlbertModel", ("AlbertConfig", dict(vocab_size=1000, max_position_embeddings=64, embedding_size=64, **small))),
    "hf_deberta_v2": text("DebertaV2Model", ("DebertaV2Config", dict(vocab_size=1000, max_position_embeddings=64, relative_attention=True, position_buckets=32, pos_att_type=["p2c", "c2p"], **small))),
    "hf_t5_encoder": text("T5EncoderModel", ("T5Config", dict(vocab_size=1000, d_model=128, d_kv=32, d_ff=256, num_layers=2, num_heads=4))),
    "hf_llama": text("LlamaForCausalLM", ("LlamaConfig", dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)), key="logits"),
    "hf_qwen2": text("Qwen2ForCausalLM", ("Qwen2Config", dict(vocab_size=1000, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)), key="logits"),
    "hf_electra": text("ElectraModel", ("ElectraConfig", dict(vocab_size=1000, max_position_embeddings=64, embedding_size=64, **small))),
    "hf_vit": image("ViTForImageClassification", ("ViTConfig", dict(image_size=64, patch_size=8, num_labels=10, **small)), key="logits"),
    "hf_clip_vision": image("CLIPVisionModel", ("CLIPVisionConfig", dict(image_size=64, patch_size=8, **small))),
    "hf_segformer": image("SegformerForSemanticSegmentation", ("SegformerConfig", dict(num_labels=5)), key="logits", size=128),
    "hf_whisper_encoder": whisper,
    # more architectures (2026-11-27): segmentation, video, grouped and re-parameterized convs, hybrid
    # attention, more language models, audio
    "tv_deeplabv3_mobilenet": segmentation("deeplabv3_mobilenet_v3_large"),
    "tv_lraspp": segmentation("lraspp_mobilenet_v3_large"),
    "tv_r3d_18": video("r3d_18"),
    "tv_resnext50": tv("resnext50_32x4d", size=96),
    "tv_efficientnet_v2_s": tv("efficientnet_v2_s", size=96),
    "tv_regnet_x_400mf": tv("regnet_x_400mf", size=128),
    "tv_maxvit_t": tv("maxvit_t"),
    "timm_resnest14d": tm("resnest14d", size=128),
    "timm_dla34": tm("dla34", size=128),
    "timm_rexnet_100": tm("rexnet_100", size=128),
    "timm_repvgg_a0": tm("repvgg_a0", size=128),
    "timm_nfnet_l0": tm("nfnet_l0", size=128),
    "timm_xcit_nano": tm("xcit_nano_12_p16_224"),
    "timm_pit_ti": tm("pit_ti_224"),
    "timm_fastvit_t8": tm("fastvit_t8", size=128),
    "timm_efficientvit_b0": tm("efficientvit_b0", size=128),
    "timm_lcnet_050": tm("lcnet_050", size=128),
    "timm_mobilenetv4_small": tm("mobilenetv4_conv_small", size=128),
    "timm_hgnetv2_b0": tm("hgnetv2_b0", size=128),
    "timm_gcvit_xxtiny": tm("gcvit_xxtiny"),
    "timm_coatnet_nano": tm("coatnet_nano_rw_224"),
    "timm_mixer_s16": tm("mixer_s16_224"),
    "hf_mobilebert": text("MobileBertModel", ("MobileBertConfig", dict(vocab_size=1000, hidden_size=128, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128, embedding_size=64, intra_bottleneck_size=64))),
    "hf_bart": text("BartModel", ("BartConfig", dict(vocab_size=1000, d_model=64, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=128, decoder_ffn_dim=128, max_position_embeddings=64))),
    "hf_gptneox": text("GPTNeoXForCausalLM", ("GPTNeoXConfig", dict(lm)), key="logits"),
    "hf_phi": text("PhiForCausalLM", ("PhiConfig", dict(lm)), key="logits"),
    "hf_gemma": text("GemmaForCausalLM", ("GemmaConfig", dict(lm, num_key_value_heads=2, head_dim=32)), key="logits"),
    "hf_mistral": text("MistralForCausalLM", ("MistralConfig", dict(lm, num_key_value_heads=2, sliding_window=8)), key="logits"),
    "hf_opt": text("OPTForCausalLM", ("OPTConfig", dict(vocab_size=1000, hidden_size=64, ffn_dim=128, num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64, word_embed_proj_dim=64)), key="logits"),
    "hf_bloom": text("BloomForCausalLM", ("BloomConfig", dict(vocab_size=1000, hidden_size=64, n_layer=2, n_head=2)), key="logits"),
    "hf_mpnet": text("MPNetModel", ("MPNetConfig", dict(vocab_size=1000, max_position_embeddings=66, **small))),
    "hf_convbert": text("ConvBertModel", ("ConvBertConfig", dict(vocab_size=1000, max_position_embeddings=64, embedding_size=64, **small))),
    "hf_squeezebert": text("SqueezeBertModel", ("SqueezeBertConfig", dict(vocab_size=1000, max_position_embeddings=64, embedding_size=128, **small))),
    "hf_wav2vec2": wav2vec2,
    "hf_swin": image("SwinModel", ("SwinConfig", dict(image_size=64, patch_size=4, embed_dim=32, depths=[1, 1], num_heads=[2, 2], window_size=4))),
    "hf_beit": image("BeitModel", ("BeitConfig", dict(image_size=64, patch_size=8, use_relative_position_bias=True, **small))),
    "hf_dinov2": image("Dinov2Model", ("Dinov2Config", dict(image_size=64, patch_size=8, **small))),
    "hf_convnextv2": image("ConvNextV2Model", ("ConvNextV2Config", dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1])), key="pooler_output"),
    "hf_mobilevitv2": image("MobileViTV2Model", ("MobileViTV2Config", dict(image_size=64)), key="pooler_output"),
}
DYNAMO = {"tv_squeezenet1_1", "tv_mobilenet_v3_small", "tv_efficientnet_b0", "tv_resnet18", "timm_vit_tiny",
          "hf_bert", "hf_gpt2", "hf_llama", "hf_t5_encoder", "hf_vit", "hf_whisper_encoder", "hf_distilbert",
          # nn.Fold (Col2Im) and, at ZOO_OPSET=23, GroupNormalization
          "hf_mobilevitv2", "hf_wav2vec2", "hf_mistral", "tv_maxvit_t", "timm_coatnet_nano"}


class Timeout(Exception): pass


def alarm(*_): raise Timeout("took over 240 s")


if __name__ == "__main__":
    out = sys.argv[1]; os.makedirs(out, exist_ok=True)
    only = tuple(sys.argv[2:])
    report = {"versions": {"torch": torch.__version__, "onnx": onnx.__version__, "ort": ort.__version__}}
    signal.signal(signal.SIGALRM, alarm)
    for name, make in ZOO.items():
        if only and not name.startswith(only): continue
        try:
            torch.manual_seed(0); m, args, names = make()
        except Exception as e:
            print(name, "build failed:", str(e)[:300], flush=True); continue
        for dynamo in (False, True) if name in DYNAMO else (False,):
            tag = f"{name}{'_dyn' if dynamo else ''}"; t = time.time(); signal.alarm(240)
            try:
                # ZOO_OPSET=23: the dynamo exports at that opset (SDPA as ONNX's Attention).
                report[tag] = export_one(out, tag, m, args, names, dynamo,
                                         dynamo_opset=int(os.environ.get("ZOO_OPSET", 0)) or None)
                print(tag, f"ok {time.time() - t:.1f}s", report[tag]["bytes"], report[tag]["ops"], flush=True)
            except BaseException as e:
                print(tag, "export failed:", str(e)[:300], flush=True)
            finally:
                signal.alarm(0)
        json.dump(report, open(f"{out}/zoo-{'-'.join(only) or 'all'}.json", "w"), indent=1)
