"""The ``evidence`` rule of ``milarun verify``: each result against the records written
apart from it (docs/tender-evidence.md).

- rule: the rule itself, its time checks against the run manifests, the kept system records;
- console_log: a result against its instance's console log (the progress lines it printed);
- energy_and_peaks: against the GPU monitor's samples and energy record, the FLOPs of a step,
  the datasheet's and the doctor's measured peaks.
"""
