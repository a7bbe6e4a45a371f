"""One optimizer step read at its phases: the bytes allocated before the forward, when the loss
is computed (what the forward saved for backward), after backward and after the optimizer step,
and the peak of each phase. Read after the timed steps, so the optimizer's states exist; core's
memory model sets these beside its prediction (ddpcheck memory --from)."""


class CudaMemory:
    """The caching allocator's counters of one device, each read after the device is idle."""

    def __init__(self, torch, device):
        self.cuda, self.device = torch.cuda, device

    def allocated(self):
        self.cuda.synchronize(self.device)
        return int(self.cuda.memory_allocated(self.device))

    def peak(self):
        self.cuda.synchronize(self.device)
        return int(self.cuda.max_memory_allocated(self.device))

    def reset(self):
        self.cuda.reset_peak_memory_stats(self.device)


def memory_phases(trainer, memory, plain=False):
    """One step of one micro-batch through the trainer's wrapped model (or its plain one),
    gradients synchronised, read at its phases through `memory` (CudaMemory): {before_forward,
    after_forward, peak_forward, after_backward, peak_backward, after_step, peak_step}. Leaves
    the peak counter reset: read the run's own peak before."""
    out = {"before_forward": memory.allocated()}
    memory.reset()
    scaler = trainer.scaler
    with trainer.sync_context(True, plain):
        loss = trainer.micro_loss(trainer.nets[plain], plain)
        out["after_forward"], out["peak_forward"] = memory.allocated(), memory.peak()
        memory.reset()
        (scaler.scale(loss) if scaler else loss).backward()
    del loss
    out["after_backward"], out["peak_backward"] = memory.allocated(), memory.peak()
    memory.reset()
    trainer.optimizer_step(plain)
    out["after_step"], out["peak_step"] = memory.allocated(), memory.peak()
    return out


def run_phases(launch, trainer, with_plain):
    """The run's phases on CUDA: {wrapped, plain} (plain only where the run has the plain step
    on the same parameters, as DDP's does); None on CPU."""
    if not launch.on_cuda:
        return None
    memory = CudaMemory(launch.torch, launch.device)
    out = {"wrapped": memory_phases(trainer, memory)}
    if with_plain:
        out["plain"] = memory_phases(trainer, memory, plain=True)
    return out
