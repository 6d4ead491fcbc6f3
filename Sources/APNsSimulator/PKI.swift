import Crypto
import Foundation
import NIOSSL
import SwiftASN1
import X509

/// The simulator's own certificate authority and TLS server certificate, made fresh at every start.
struct SimulatorPKI: Sendable {
    let caPEM: String
    let serverChain: [NIOSSLCertificate]
    let serverKey: NIOSSLPrivateKey

    static func generate(now: Date = Date()) throws -> SimulatorPKI {
        let caKey = P256.Signing.PrivateKey()
        let caName = try DistinguishedName {
            OrganizationName("Beacon")
            CommonName("Beacon APNs Simulator CA")
        }
        let ca = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(caKey.publicKey), notValidBefore: now - 3600,
            notValidAfter: now + 365 * 86400, issuer: caName, subject: caName, signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(keyCertSign: true, cRLSign: true))
            },
            issuerPrivateKey: .init(caKey))
        let serverKey = P256.Signing.PrivateKey()
        let server = try Certificate(
            version: .v3, serialNumber: .init(), publicKey: .init(serverKey.publicKey), notValidBefore: now - 3600,
            notValidAfter: now + 365 * 86400, issuer: caName,
            subject: try DistinguishedName {
                OrganizationName("Beacon")
                CommonName("localhost")
            },
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.notCertificateAuthority)
                Critical(KeyUsage(digitalSignature: true))
                try ExtendedKeyUsage([.serverAuth])
                SubjectAlternativeNames([
                    .dnsName("localhost"), .ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1])),
                    .ipAddress(ASN1OctetString(contentBytes: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1])),
                ])
            },
            issuerPrivateKey: .init(caKey))
        return SimulatorPKI(
            caPEM: try ca.serializeAsPEM().pemString,
            serverChain: [
                try NIOSSLCertificate(bytes: Array(try server.serializeAsPEM().pemString.utf8), format: .pem),
                try NIOSSLCertificate(bytes: Array(try ca.serializeAsPEM().pemString.utf8), format: .pem),
            ],
            serverKey: try NIOSSLPrivateKey(bytes: Array(serverKey.pemRepresentation.utf8), format: .pem))
    }
}
