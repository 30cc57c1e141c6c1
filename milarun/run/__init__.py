"""The supervisor (``milarun jobs``): suites, profiles, the plan of instances, their launch
and progress."""
