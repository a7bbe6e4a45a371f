"""Models built by code: the user's factory (`py:`), torchvision, timm and Hugging Face configs
(docs/recommend.md, "Your own model"). Each becomes a workload: the module, one micro-batch of a
given size, the loss, the optimizer and what one sample counts as. Every bad input is one line."""

import contextlib
import math
import os
import sys

from .errors import Fatal, one_line, raised, where

FACTORY_CONTRACT = "{'model': nn.Module, 'batch': callable} or (model, batch)"
# Every key a factory's dict may hold (docs/recommend.md, "Your own model").
FACTORY_KEYS = ("model", "batch", "loss", "optimizer", "tokens_per_sample")
BATCH_SIGNATURE = "batch(n, device, generator)"


def typed(value):
    """A configuration override's text as the int, float or bool it reads as."""
    if value in ("true", "false", "True", "False"):
        return value in ("true", "True")
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


@contextlib.contextmanager
def deadline(seconds, message):
    """Interrupts Python code that runs longer than `seconds` (SIGALRM in the main thread); the
    launch's own deadline stays the backstop for a hang in C."""
    import signal

    def expired(signum, frame):
        raise Fatal(message, "invalid")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(max(1, int(math.ceil(seconds))))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def import_library(name, spec_name):
    """Imports a model library, or one line naming it and the interpreter."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as e:
        if getattr(e, "name", None) == name:
            raise Fatal("%s is not installed for %s (needed by %s)" % (name, sys.executable, spec_name),
                        "unavailable") from None
        raise Fatal("%s cannot be imported by %s (needed by %s): %s" % (name, sys.executable, spec_name, one_line(e)),
                    "unavailable") from None


def import_factory_module(target):
    """The module of a factory: a .py file (its folder goes on sys.path) or an importable name."""
    import importlib
    import importlib.util

    if not target.endswith(".py"):
        return importlib.import_module(target)
    if not os.path.isfile(target):
        raise Fatal("factory file %s not found" % target, "invalid")
    sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
    spec = importlib.util.spec_from_file_location("ddpcheck_factory", target)
    module = importlib.util.module_from_spec(spec)
    sys.modules["ddpcheck_factory"] = module
    spec.loader.exec_module(module)
    return module


def load_factory(target, function, seconds):
    """The factory function: from a .py file or an importable module, imported within `seconds`."""
    label = "py:%s:%s" % (target, function)
    with deadline(seconds, "importing %s did not finish within %g s" % (label, seconds)):
        try:
            module = import_factory_module(target)
        except ModuleNotFoundError as e:
            missing = e.name or str(e)
            if target == missing or target.startswith(missing + "."):
                raise Fatal("no module named %s for %s (%s)" % (missing, sys.executable, label), "invalid") from None
            raise Fatal("importing %s: no module named %s for %s%s" % (label, missing, sys.executable, where(e)),
                        "unavailable") from None
        except Exception as e:
            raise raised("importing %s" % label, e) from None
    fn = getattr(module, function, None)
    if fn is None:
        raise Fatal("%s has no function %s" % (target, function), "invalid")
    if not callable(fn):
        raise Fatal("%s.%s is of type %s, not a function" % (target, function, type(fn).__name__), "invalid")
    return fn


def call_factory(torch, fn, function, seconds):
    """Calls the factory within `seconds` and checks what it returned against the contract."""
    with deadline(seconds, "factory %s did not return within %g s" % (function, seconds)):
        try:
            made = fn()
        except Exception as e:
            raise raised("factory %s" % function, e) from None
    return check_factory_result(torch, made, function)


def check_factory_result(torch, made, function):
    """What a factory returned as the contract's dict, or one line saying what is wrong."""
    expected = "%s returned %%s; expected %s" % (function, FACTORY_CONTRACT)
    if isinstance(made, (tuple, list)) and len(made) == 2:
        made = {"model": made[0], "batch": made[1]}
    elif not isinstance(made, dict):
        raise Fatal(expected % type(made).__name__, "invalid")
    keys = ", ".join(repr(k) for k in made)
    for key in ("model", "batch"):
        if key not in made:
            raise Fatal("%s returned no %r key (its keys: %s); expected %s"
                        % (function, key, keys or "none", FACTORY_CONTRACT), "invalid")
    unknown = [k for k in made if k not in FACTORY_KEYS]
    if unknown:
        raise Fatal("%s returned unknown key %s; a factory's keys are %s"
                    % (function, ", ".join(repr(k) for k in unknown), ", ".join(FACTORY_KEYS)), "invalid")
    model, batch = made.get("model"), made.get("batch")
    if not isinstance(model, torch.nn.Module):
        raise Fatal(expected % ("a model of type %s" % type(model).__name__), "invalid")
    if not callable(batch):
        raise Fatal(expected % ("a batch of type %s" % type(batch).__name__), "invalid")
    for key in ("loss", "optimizer"):
        if made.get(key) is not None and not callable(made[key]):
            raise Fatal("%s returned a %s that is a %s, not a callable" % (function, key, type(made[key]).__name__),
                        "invalid")
    tps = made.get("tokens_per_sample")
    if tps is not None and (isinstance(tps, bool) or not isinstance(tps, int) or tps < 1):
        raise Fatal("%s returned tokens_per_sample %r; expected a positive integer" % (function, tps), "invalid")
    return made


def default_loss(model, batch):
    """The stand-in loss: the model's own `.loss` where its output has one (Hugging Face with
    labels), else the mean of its output (its first element for a tuple)."""
    if isinstance(batch, dict):
        out = model(**batch)
    elif isinstance(batch, (tuple, list)):
        out = model(*batch)
    else:
        out = model(batch)
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is not None:
        return loss
    if isinstance(out, dict):
        if len(out) != 1:
            raise Fatal("the model's forward returned a dict of %s without a 'loss' key, and ddpcheck trains one "
                        "loss: return their total as 'loss' (Hugging Face models do where the batch has labels), "
                        "or give the factory a 'loss' function" % ", ".join(repr(k) for k in out), "invalid")
        out = next(iter(out.values()))
    if isinstance(out, (tuple, list)):
        out = out[0]
    return out.float().mean()


def classifier_workload(torch, model, image, classes, spec_name):
    """Images of `image` pixels and random labels; cross-entropy on the logits (a tuple's first)."""
    F = torch.nn.functional

    def batch(n, device, gen):
        x = torch.randn(n, 3, image, image, device=device, generator=gen)
        y = torch.randint(0, classes, (n,), device=device, generator=gen)
        return x, y

    def loss(m, b):
        out = m(b[0])
        out = getattr(out, "logits", out)
        if isinstance(out, (tuple, list)):
            out = out[0]
        return F.cross_entropy(out.float(), b[1])

    return {"model": model, "batch": batch, "loss": loss, "optimizer": None, "tokens_per_sample": None,
            "name": spec_name}


def hf_config(transformers, src, spec_name):
    """The Hugging Face configuration: a config.json's, or a model type's defaults, with the
    overrides on top."""
    overrides = {k: typed(v) for k, v in src.get("overrides") or []}
    if not src.get("config_path"):
        return transformers.AutoConfig.for_model(src["model_type"], **overrides)
    path = src["config_path"]
    if not os.path.isfile(path):
        raise Fatal("Hugging Face configuration %s not found" % path, "invalid")
    # The file named, which a daemon checked, not whatever config.json lies beside it.
    cfg = transformers.AutoConfig.from_pretrained(os.path.abspath(path))
    for k, v in overrides.items():
        setattr(cfg, k, v)
    return cfg


def hf_workload(torch, src, spec_name):
    """A causal language model from its configuration, random weights, batches of `seq` random
    tokens with themselves as labels (the model shifts them)."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    transformers = import_library("transformers", spec_name)
    try:
        cfg = hf_config(transformers, src, spec_name)
        model = transformers.AutoModelForCausalLM.from_config(cfg)
    except Fatal:
        raise
    except Exception as e:
        raise Fatal("transformers cannot build %s: %s" % (spec_name, one_line(e)), "invalid") from None
    seq, vocab = src["seq"], int(cfg.vocab_size)

    def batch(n, device, gen):
        ids = torch.randint(0, vocab, (n, seq), device=device, generator=gen)
        return {"input_ids": ids, "labels": ids}

    return {"model": model, "batch": batch, "loss": None, "optimizer": None, "tokens_per_sample": seq,
            "name": spec_name}


def factory_workload(torch, src, name, seconds):
    fn = load_factory(src["target"], src["function"], seconds)
    made = call_factory(torch, fn, src["function"], seconds)
    return {"model": made["model"], "batch": made["batch"], "loss": made.get("loss"),
            "optimizer": made.get("optimizer"), "tokens_per_sample": made.get("tokens_per_sample"),
            "name": name}


def torchvision_workload(torch, src, name, seconds):
    with deadline(seconds, "importing torchvision did not finish within %g s" % seconds):
        tv = import_library("torchvision", name)
    if hasattr(tv.models, "list_models") and src["name"] not in tv.models.list_models():
        raise Fatal("torchvision %s has no model %s" % (tv.__version__, src["name"]), "invalid")
    try:
        model = tv.models.get_model(src["name"], weights=None)
    except Exception as e:
        raise Fatal("torchvision cannot build %s: %s" % (src["name"], one_line(e)), "invalid") from None
    image = 299 if src["name"].startswith("inception") else 224
    classes = getattr(getattr(model, "fc", None), "out_features", None) or 1000
    return classifier_workload(torch, model, image, classes, name)


def timm_workload(torch, src, name, seconds):
    with deadline(seconds, "importing timm did not finish within %g s" % seconds):
        timm = import_library("timm", name)
    try:
        model = timm.create_model(src["name"], pretrained=False)
    except Exception as e:
        raise Fatal("timm cannot build %s: %s" % (src["name"], one_line(e)), "invalid") from None
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    image = int((cfg.get("input_size") or (3, 224, 224))[-1])
    return classifier_workload(torch, model, image, int(getattr(model, "num_classes", 1000) or 1000), name)


def external_workload(torch, spec, seconds):
    """The workload of a model built by code, on the CPU (the caller moves it)."""
    src, name = spec["source"], spec["name"]
    kind = src["kind"]
    if kind == "python":
        return factory_workload(torch, src, name, seconds)
    if kind == "torchvision":
        return torchvision_workload(torch, src, name, seconds)
    if kind == "timm":
        return timm_workload(torch, src, name, seconds)
    with deadline(seconds, "importing transformers did not finish within %g s" % seconds):
        return hf_workload(torch, src, name)


def check_trainable(model):
    """One line where DDP would have nothing to send."""
    params = list(model.parameters())
    if not params:
        raise Fatal("the model has no parameters", "invalid")
    if not any(p.requires_grad for p in params):
        raise Fatal("no trainable parameters: all %d are frozen (%d tensors)"
                    % (sum(p.numel() for p in params), len(params)), "invalid")


def defined_at(fn):
    """` (defined at FILE:LINE)` of a Python function, "" where it has no source file."""
    import inspect

    try:
        return " (defined at %s:%d)" % (inspect.getsourcefile(fn), fn.__code__.co_firstlineno)
    except (TypeError, AttributeError):
        return ""


def call_batch(make_batch, n, device, gen):
    """One micro-batch from the factory's batch function, or one line saying why not: a
    signature that does not take the three arguments names the user's function, not this call."""
    what = "batch(%d, %s, generator)" % (n, device)
    try:
        return make_batch(n, device, gen)
    except Fatal:
        raise
    except TypeError as e:
        if e.__traceback__ is not None and e.__traceback__.tb_next is None:  # the call did not bind
            raise Fatal("%s raised %s: the factory's batch must be %s%s"
                        % (what, one_line(e), BATCH_SIGNATURE, defined_at(make_batch)), "invalid") from None
        raise raised(what, e) from None
    except Exception as e:
        raise raised(what, e) from None


def move_model(torch, model, device):
    """The model on the run's device, or one line: parameters on the meta device have no data."""
    if any(t.is_meta for t in list(model.parameters()) + list(model.buffers())):
        raise Fatal("the model's parameters are on the meta device, with no data to move to %s: build them "
                    "on the CPU, or materialise them in the factory (to_empty() and initialise them)" % device,
                    "invalid")
    try:
        model.to(device)
    except Exception as e:
        if is_oom(torch, e):
            raise
        raise raised("moving the model to %s" % device, e) from None


def model_failure(torch, what, exc, model, device, amp, attempt):
    """What failed in the model's own passes as one line with its cause: autocast where the same
    passes run without it (`attempt(context)` redoes them), reduced-precision parameters on the
    CPU, else the error where it was raised. what: (the passes, what failing them says)."""
    if isinstance(exc, Fatal):
        return exc
    passes, failed = what
    error = "%s%s" % (one_line(exc), where(exc))
    said = "%s: %s" % (failed, error)
    if amp != "none":
        try:
            attempt(contextlib.nullcontext)
        except Exception:
            pass
        else:
            return Fatal("%s fails under autocast (--amp %s) on %s with torch %s and runs without it: %s; "
                         "pass --amp none" % (passes, amp, device, torch.__version__, error), "invalid")
    reduced = sorted({str(p.dtype).replace("torch.", "") for p in model.parameters()
                      if p.dtype in (torch.float16, torch.bfloat16)})
    if reduced and getattr(device, "type", str(device)) == "cpu":
        return Fatal("%s; the model has %s parameters, which torch %s cannot train on the CPU here: build it in "
                     "float32 (reduced precision is --amp's)" % (said, "/".join(reduced), torch.__version__), "invalid")
    return Fatal(said, "invalid")


def is_oom(torch, exc):
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "CUDA out of memory" in str(exc)


def try_micro_batch(torch, work, model, mb, device, autocast, amp="none"):
    """One forward of the bare model on one micro-batch, before DDP: a batch the model rejects,
    autocast it refuses, or a loss that is not a scalar, is one line here rather than a traceback
    mid-run."""
    gen = torch.Generator(device=device)
    gen.manual_seed(1)
    b = call_batch(work["batch"], mb, device, gen)

    def forward(context):
        with torch.no_grad(), context():
            return (work["loss"] or default_loss)(model, b)

    try:
        loss = forward(autocast)
    except Exception as e:
        if is_oom(torch, e):
            raise
        what = ("the model's forward on a micro-batch of %d" % mb, "the model rejected a micro-batch of %d" % mb)
        raise model_failure(torch, what, e, model, device, amp, forward) from None
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        what = "a tensor of shape %s" % list(loss.shape) if isinstance(loss, torch.Tensor) else type(loss).__name__
        raise Fatal("the loss of a micro-batch of %d is %s; expected a scalar tensor" % (mb, what), "invalid")
