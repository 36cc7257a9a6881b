# What the export scripts share (run on the GPU machine: torch, onnx, onnxruntime): one PyTorch
# model exported to ONNX and recorded with ONNX Runtime's output. Keep it beside the script that
# imports it.
import os, numpy as np, onnx, onnxruntime as ort, torch


def export(out, name, model, args, names, dynamic_axes=None):
    """Exports `model` on `args` to OUT/NAME.onnx (the TorchScript exporter, the dynamo one where
    that fails), runs ONNX Runtime's CPU provider on it, writes each input and the output beside
    it (NAME.in.K.DTYPE.bin, NAME.out.y.float32.bin) and returns the models.json entry, or None
    when neither exporter could."""
    path = f"{out}/{name}.onnx"
    for dynamo in (False, True):
        try:
            torch.onnx.export(model, args, path, input_names=names, output_names=["y"], opset_version=17,
                              dynamo=dynamo, do_constant_folding=True, dynamic_axes=dynamic_axes)
            break
        except Exception as e:
            print(name, "dynamo", dynamo, "failed:", str(e)[:300])
    else:
        return None
    mp = onnx.load(path, load_external_data=True); onnx.save(mp, path)
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    y = sess.run(None, feeds)[0]
    for k, v in feeds.items(): v.tofile(f"{out}/{name}.in.{k}.{v.dtype}.bin")
    y.astype(np.float32).tofile(f"{out}/{name}.out.y.float32.bin")
    entry = {"inputs": {k: [list(v.shape), str(v.dtype)] for k, v in feeds.items()}, "output": [list(y.shape), "float32"],
             "ops": sorted({n.op_type for n in mp.graph.node}), "opset": [o.version for o in mp.opset_import]}
    print(name, entry["ops"])
    return entry


def export_one(out, tag, m, args, names, dynamo, opset=17, dynamic_axes=None, inline=True, dynamo_opset=None):
    """Exports `m` on `args` to OUT/TAG.onnx through one exporter (dynamo at `dynamo_opset`, its
    default unless told, or TorchScript at `opset`, 17 unless told), with `dynamic_axes` (TorchScript) or every input
    axis 0 dynamic (dynamo, where `dynamic_axes` is given); inlines its external data unless
    `inline` is false (dynamo then leaves TAG.onnx.data beside it, as a user gets it); writes the
    inputs and ONNX Runtime's output `y` beside it and returns its entry (the models.json layout,
    with ONNX Runtime's error against torch)."""
    path = f"{out}/{tag}.onnx"
    with torch.no_grad():
        if dynamo:
            batch = torch.export.Dim("batch")
            dyn = {"dynamic_shapes": tuple({0: batch} for _ in args)} if dynamic_axes else {}
            at = {"opset_version": dynamo_opset} if dynamo_opset else {}
            torch.onnx.export(m, args, path, input_names=names, output_names=["y"], dynamo=True,
                              external_data=not inline, **dyn, **at)
        else:
            torch.onnx.export(m, args, path, input_names=names, output_names=["y"], opset_version=opset,
                              dynamo=False, do_constant_folding=True, dynamic_axes=dynamic_axes)
    mp = onnx.load(path, load_external_data=True)
    if inline:
        onnx.save(mp, path)
        for f in os.listdir(out):  # external data the save inlined
            if f.startswith(tag) and f.endswith(".data"): os.remove(f"{out}/{f}")
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    feeds = {i.name: a.numpy() for i, a in zip(sess.get_inputs(), args)}
    y = sess.run(None, feeds)[0]
    with torch.no_grad():
        ref = m(*args).numpy()
    for k, v in feeds.items(): v.tofile(f"{out}/{tag}.in.{k}.{v.dtype}.bin")
    y.astype(np.float32).tofile(f"{out}/{tag}.out.y.float32.bin")
    return {"inputs": {k: [list(v.shape), str(v.dtype)] for k, v in feeds.items()}, "output": [list(y.shape), "float32"],
            "ort_vs_torch": float(np.abs(y - ref).max() / max(np.abs(ref).max(), 1e-30)),
            "ops": sorted({n.op_type for n in mp.graph.node}), "opset": [o.version for o in mp.opset_import],
            "bytes": os.path.getsize(path), "external": sorted(f for f in os.listdir(out) if f.startswith(f"{tag}.onnx."))}
