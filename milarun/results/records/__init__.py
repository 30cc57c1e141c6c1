"""The file format's records, each declared once: the one builder of a result
(ResultRecord) and every nested record it holds, each a frozen dataclass that writes itself
(``to_dict``) and reads whatever a file holds (``from_dict``, records.base). The report,
the tender, the history, the doctor and Slurm read them through results.read.ResultView.

The machine's own records (GpuIdentity, SlurmBlock) are declared where the machine reads
them (machine.gpuids, machine.slurmenv: below this floor) and read here by read_record.
"""

from milarun.machine.gpuids import GpuIdentity as GpuIdentity
from milarun.machine.slurmenv import SlurmBlock as SlurmBlock
from milarun.results.records.base import FileRecord as FileRecord
from milarun.results.records.base import read_record as read_record
from milarun.results.records.base import write_record as write_record
from milarun.results.records.energy import Efficiency as Efficiency
from milarun.results.records.energy import Energy as Energy
from milarun.results.records.energy import MathSettings as MathSettings
from milarun.results.records.energy import NodeEnergy as NodeEnergy
from milarun.results.records.quality import Contention as Contention
from milarun.results.records.quality import Diagnostics as Diagnostics
from milarun.results.records.quality import RunLengthRecord as RunLengthRecord
from milarun.results.records.quality import Startup as Startup
from milarun.results.records.quality import StartupCost as StartupCost
from milarun.results.records.result import ENV_PREFIXES as ENV_PREFIXES
from milarun.results.records.result import NOT_RECORDED as NOT_RECORDED
from milarun.results.records.result import SECRET_WORDS as SECRET_WORDS
from milarun.results.records.result import Record as Record
from milarun.results.records.result import ResultRecord as ResultRecord
from milarun.results.records.result import gpu_name as gpu_name
from milarun.results.records.result import recorded_environ as recorded_environ
from milarun.results.records.run import Call as Call
from milarun.results.records.run import Dataset as Dataset
from milarun.results.records.run import Failure as Failure
from milarun.results.records.run import Isolation as Isolation
from milarun.results.records.timings import RateRecord as RateRecord
from milarun.results.records.timings import TimerRecord as TimerRecord
