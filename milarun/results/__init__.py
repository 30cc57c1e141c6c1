"""Result files: the format (schema), their names, writing and loading them, and the typed
reader (read.ResultView). This module is the wing's face: it hands on the names its
modules define, and the modules of the wing import each other, never this face.
"""

from milarun.results.files import MAX_ERROR as MAX_ERROR
from milarun.results.files import MAX_LABEL as MAX_LABEL
from milarun.results.files import MAX_MESSAGE as MAX_MESSAGE
from milarun.results.files import as_result as as_result
from milarun.results.files import load_result as load_result
from milarun.results.files import write_atomic as write_atomic
from milarun.results.files import write_result as write_result
from milarun.results.files import write_text_atomic as write_text_atomic
from milarun.results.jsonfile import MAX_DEPTH as MAX_DEPTH
from milarun.results.jsonfile import MAX_FILE_BYTES as MAX_FILE_BYTES
from milarun.results.jsonfile import read_json as read_json
from milarun.results.jsonfile import too_deep as too_deep
from milarun.results.names import MAX_NAME as MAX_NAME
from milarun.results.names import parse_filename as parse_filename
from milarun.results.names import result_filename as result_filename
from milarun.results.names import result_paths as result_paths
from milarun.results.names import safe_name as safe_name
from milarun.results.names import utc_stamp as utc_stamp
from milarun.results.schema import DOCTOR_RECORD as DOCTOR_RECORD
from milarun.results.schema import FAILURE_KINDS as FAILURE_KINDS
from milarun.results.schema import FORMAT_VERSION as FORMAT_VERSION
from milarun.results.schema import HARNESS_FLAGS as HARNESS_FLAGS
from milarun.results.schema import MAX_RATE as MAX_RATE
from milarun.results.schema import MAX_WEIGHT as MAX_WEIGHT
from milarun.results.schema import WRITTEN_BY as WRITTEN_BY
from milarun.results.schema import is_finite as is_finite
from milarun.results.schema import is_number as is_number
from milarun.results.schema import positive as positive
from milarun.results.shape import END_KEYS as END_KEYS
from milarun.results.shape import LAUNCH_KEYS as LAUNCH_KEYS
from milarun.results.shape import OWN_KEYS as OWN_KEYS
from milarun.results.shape import RECORD_KEYS as RECORD_KEYS
from milarun.results.shape import RESULT_KEYS as RESULT_KEYS
from milarun.results.shape import result_problem as result_problem
