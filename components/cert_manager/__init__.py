from .component import PrivateCertificateAuthority

__all__ = ["PrivateCertificateAuthority"]
