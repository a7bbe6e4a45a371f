//! The benchmark package builds the model core counts: each spec goes through the launch's
//! config JSON into its parser and `presets.build_model`, run against a stand-in for
//! `torch.nn` that only records parameter shapes (CI may have no torch).

use ddpcheck_core::ddp::{DdpVariant, ModelSpec};

use super::script_config;
use super::tests::{embedded_script, request, with_script_module};

/// A stand-in for the parts of `torch.nn` that `build_model` calls while building: modules
/// that register their parameters, and parameters that only know their shape.
const STAND_IN_TORCH: &str = r#"
import types
from math import prod

class Param:
    def __init__(self, *shape):
        self.shape = shape
    def numel(self):
        return prod(self.shape)

class Module:
    def __init__(self):
        object.__setattr__(self, "_own", {})
    def __setattr__(self, key, value):
        if isinstance(value, (Module, Param)):
            self._own[key] = value
        else:
            self._own.pop(key, None)
        object.__setattr__(self, key, value)
    def parameters(self):
        seen = set()
        for v in self._own.values():
            for p in (v.parameters() if isinstance(v, Module) else [v]):
                if id(p) not in seen:
                    seen.add(id(p))
                    yield p
    def apply(self, fn):
        for v in self._own.values():
            if isinstance(v, Module):
                v.apply(fn)
        fn(self)

class Linear(Module):
    def __init__(self, i, o, bias=True):
        super().__init__()
        self.weight = Param(o, i)
        self.bias = Param(o) if bias else None

class Embedding(Module):
    def __init__(self, n, width):
        super().__init__()
        self.weight = Param(n, width)

class LayerNorm(Module):
    def __init__(self, width):
        super().__init__()
        self.weight, self.bias = Param(width), Param(width)

class RMSNorm(Module):
    def __init__(self, width, eps=None):
        super().__init__()
        self.weight = Param(width)

class ModuleList(Module):
    def __init__(self, items):
        super().__init__()
        for i, item in enumerate(items):
            setattr(self, str(i), item)

init = types.SimpleNamespace(normal_=lambda *a, **k: None, zeros_=lambda *a, **k: None)
nn = types.SimpleNamespace(Module=Module, Linear=Linear, Embedding=Embedding, LayerNorm=LayerNorm,
                           RMSNorm=RMSNorm, ModuleList=ModuleList, init=init,
                           functional=types.SimpleNamespace())
torch = types.SimpleNamespace(nn=nn)
"#;

#[test]
fn script_builds_the_parameters_core_counts() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let specs: Vec<ModelSpec> = [
        "mlp:1024x4",
        "mlp:784->2048x4->10",
        "gpt2-124m",
        "decoder:3,96,4,128,500,ffn=200,kv=2,untied",
        "decoder:2,64,4,256,1000,llama,ffn=176,kv=2,untied",
        "decoder:2,64,4,256,1000,llama,ffn=176",
    ]
    .iter()
    .map(|s| s.parse().unwrap())
    .collect();
    let req = request(DdpVariant::default(), vec![1], 100.0);
    let base = DdpVariant::default();
    let items: Vec<(&ModelSpec, &DdpVariant)> = specs.iter().map(|s| (s, &base)).collect();
    let body = format!(
        "{STAND_IN_TORCH}\n\
         cfg = config.load_config(sys.argv[2])\n\
         print(json.dumps([[spec['name'], sum(p.numel() for p in presets.build_model(torch, spec).parameters())]\n\
                           for spec, _ in cfg['runs']]))"
    );
    let config = script_config(&req, &items, 1, false);
    let built = with_script_module(py, &script, &body, &[&config], &[]);
    for (spec, got) in specs.iter().zip(built.as_array().unwrap()) {
        assert_eq!(got[0], spec.name().as_str(), "{}", spec.to_arg());
        assert_eq!(got[1], spec.params(), "{}", spec.to_arg());
    }
    assert_eq!(built.as_array().unwrap().len(), specs.len());
}

#[test]
fn script_refuses_what_core_refuses() {
    let Some((py, _dir, script)) = embedded_script() else {
        return;
    };
    let read = |model: &str| {
        let config = format!(r#"{{"model": {model}, "variant": {{}}}}"#);
        with_script_module(
            py,
            &script,
            "try:\n    config.load_config(sys.argv[2])\n    print(json.dumps('accepted'))\nexcept errors.Fatal as e:\n    print(json.dumps(str(e)))",
            &[&config],
            &[],
        )
    };
    for (model, says) in [
        (r#"{"kind": "mlp", "width": 64, "input": 10}"#, "output"),
        (
            r#"{"kind": "decoder", "layers": 2, "width": 64, "heads": 4, "kv_heads": 3}"#,
            "divide",
        ),
        (
            r#"{"kind": "decoder", "layers": 2, "width": 64, "heads": 4, "arch": "t5"}"#,
            "arch",
        ),
    ] {
        let said = read(model);
        assert!(said.as_str().unwrap().contains(says), "{model}: {said}");
    }
}
