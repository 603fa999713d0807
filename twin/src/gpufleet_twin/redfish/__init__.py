"""iDRAC-like Redfish BMCs for the twin's nodes.

``service.install(twin, ...)`` gives nodes a BMC each (see ``service``);
``model`` is the BMC's pure state, ``resources`` renders it as Redfish JSON,
``app`` serves it over HTTP(S), ``image`` defines the firmware image format
the BMCs accept (``build_firmware_image`` makes one for tests).
"""

from .image import build_firmware_image, parse_firmware_image
from .service import BMC_ADDRESS_ANNOTATION, BmcFleet, CaPair, find_fleet, install

__all__ = [
    "BMC_ADDRESS_ANNOTATION",
    "BmcFleet",
    "CaPair",
    "build_firmware_image",
    "find_fleet",
    "install",
    "parse_firmware_image",
]
